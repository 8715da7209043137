"""torch's CPU thread count, per computing thread.

``torch.set_num_threads(n)`` reaches MKL only in the calling thread (``mkl_set_num_threads_local``):
a thread started later runs its first matmul on an OpenMP team as large as the process default.
So each thread that runs torch on the CPU sets its own count first (:func:`pin_torch_threads`): the
in-process engine's decode thread its ``threads`` (``engine.num_threads``), the trainer its own.

Why it matters (`lego bench async`, 2 cores, the embedded default's ``engine.num_threads = 2``):
with ``training.max_staleness >= 1`` the engine's decode and the update run at once, each on a
two-thread OpenMP team, four threads spinning at barriers on two cores; an update took 27–35 s
beside the rollouts against 7–11 s alone. :func:`split_cpu_threads` gives each side its share.
"""

from __future__ import annotations

import os

import torch

__all__ = ["pin_torch_threads", "split_cpu_threads"]


def pin_torch_threads(n: int | None = None) -> None:
    """Run the calling thread's torch ops (MKL's included) on ``n`` threads (None: the process's count)."""
    torch.set_num_threads(n if n is not None else torch.get_num_threads())


def split_cpu_threads(engine_threads: int, cores: int | None = None) -> tuple[int, int]:
    """(engine, trainer) threads when the engine and the update share ``cores`` at once: the engine
    keeps its count while one core is left for the update, else each gets half (at least one)."""
    cores = cores or os.cpu_count() or 1
    engine = engine_threads if engine_threads < cores else max(1, cores // 2)
    return engine, max(1, cores - engine)
