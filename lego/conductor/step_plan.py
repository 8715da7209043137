"""What one training step works on: its tasks (epochs over a seeded permutation) and, in a
mixed-harness run, the harness of each task. Pure functions of (config, step), so a resumed run
repeats the same plan."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lego.config import LegoConfig
from lego.seams import TaskSource
from lego.types import Task

if TYPE_CHECKING:
    from lego.conductor.drive import RolloutOptions

__all__ = [
    "canary_jobs",
    "enough_evidence",
    "sample_seed",
    "step_harnesses",
    "step_tasks",
    "trained_harness",
    "training_harnesses",
]


def sample_seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:4], "little")


def step_tasks(
    tasks: Sequence[Task], step: int, per_step: int, seed: int, usable: Callable[[Task], bool] | None = None
) -> list[Task]:
    """Tasks of ``step``: epochs walk a seeded permutation, so every task comes up and resume repeats the same.
    With ``usable``, a task it refuses is passed over for the next positions of the walk (deterministic
    when ``usable`` is, as the evidence a task rests on is: lego.sandboxes.grading.behavioural_evidence)."""
    out: list[Task] = []
    i, end = step * per_step, (step + 1) * per_step
    scanned = 0
    while len(out) < per_step and (i < end or (usable is not None and scanned < len(tasks) + per_step)):
        epoch, pos = divmod(i, len(tasks))
        order = list(range(len(tasks)))
        random.Random(sample_seed(seed, "epoch", epoch)).shuffle(order)
        task = tasks[order[pos]]
        if usable is None or usable(task):
            out.append(task)
        i += 1
        scanned += 1
    return out


def step_harnesses(tasks: Sequence[Task], cfg: LegoConfig, step: int) -> list[str]:
    """The harness of each task of ``step``; a task's G rollouts share it (advantages are per group).

    Task metadata (``harness``) wins. The other tasks are split over ``harness.weights`` as evenly
    as the step's B allows (largest remainder, ties and order drawn from a per-step seed), so every
    step of a mixed run trains on each harness its weights give a whole task; without weights,
    ``harness.name``. Seeded by step: a resumed run repeats the same assignment."""
    out = [t.metadata.get("harness") for t in tasks]
    free = [i for i, h in enumerate(out) if not (isinstance(h, str) and h)]
    weights = {n: w for n, w in sorted(cfg.harness.weights.items()) if w > 0}
    if not weights:
        for i in free:
            out[i] = cfg.harness.name
        return [str(h) for h in out]
    rng = random.Random(sample_seed(cfg.training.seed, "harness", step))
    total = sum(weights.values())
    quota = {n: len(free) * w / total for n, w in weights.items()}
    counts = {n: int(q) for n, q in quota.items()}
    by_remainder = sorted(weights, key=lambda n: (-(quota[n] - counts[n]), rng.random()))
    for n in by_remainder[: len(free) - sum(counts.values())]:
        counts[n] += 1
    pool = [n for n in weights for _ in range(counts[n])]
    rng.shuffle(pool)
    for i, h in zip(free, pool, strict=True):
        out[i] = h
    return [str(h) for h in out]


def training_harnesses(cfg: LegoConfig) -> list[str]:
    """The harnesses a run trains in, sorted: those ``harness.weights`` gives a positive weight, else
    ``harness.name`` (task metadata may pin others; the config cannot know those)."""
    return sorted(n for n, w in cfg.harness.weights.items() if w > 0) or [cfg.harness.name]


def trained_harness(cfg: LegoConfig) -> str:
    """What ``lego_meta.json`` records as the harness a checkpoint was trained in: ``harness.name``,
    or the weighted harnesses joined by ``+`` for a mixed run (the eval's transfer matrix then marks
    every one of them as in-distribution: :func:`lego.eval.matrix.trained_in`)."""
    return "+".join(training_harnesses(cfg))


def enough_evidence(cfg: LegoConfig, source: TaskSource) -> Callable[[Task], bool] | None:
    """``usable`` for :func:`step_tasks`: whether a task's FAIL_TO_PASS tests rest on witnessed behaviour at
    least ``tasks.min_behavioural_evidence`` of the time (measured from the gold patch once per task, cached);
    None when the threshold is 0. A task without a gold patch is kept: its evidence is not known."""
    threshold = cfg.tasks.min_behavioural_evidence
    if threshold <= 0:
        return None
    from lego.sandboxes.grading import behavioural_evidence

    known: dict[str, bool] = {}

    def usable(task: Task) -> bool:
        if task.instance_id not in known:
            share = behavioural_evidence(source.materialize(task), cfg.sandbox)
            known[task.instance_id] = share is None or share >= threshold
        return known[task.instance_id]

    return usable


def canary_jobs(
    cfg: LegoConfig, tasks: Sequence[Task], source: TaskSource, step: int
) -> list[tuple[Task, str, RolloutOptions]]:
    """The step's impossible canaries (:mod:`lego.tasks.canary`), one rollout each: ``tasks.canary_rate``
    of the step's rollouts (at least one when > 0), made from tasks of the split drawn by the step's
    seed (the same on resume); a mixed run's canaries take its harnesses in turn. Both loops run them
    beside the step's groups and never train on them."""
    from lego.conductor.drive import RolloutOptions
    from lego.tasks.canary import pick_canaries

    if cfg.tasks.canary_rate <= 0:
        return []
    count = max(1, round(cfg.tasks.canary_rate * cfg.training.tasks_per_step * cfg.algorithm.group_size))
    canaries = pick_canaries(tasks, count, sample_seed(cfg.training.seed, "canary", step), source.materialize)
    harnesses = training_harnesses(cfg)
    return [
        (
            canary,
            harnesses[ci % len(harnesses)],
            RolloutOptions(
                override_sampling=cfg.training.sampling_override,
                temperature=cfg.algorithm.temperature,
                seed=sample_seed(cfg.training.seed, step, "canary", ci),
                max_turns=cfg.harness.max_turns,
                timeout_s=cfg.harness.timeout_s,
            ),
        )
        for ci, canary in enumerate(canaries)
    ]
