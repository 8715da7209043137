"""A training run's directory: its paths, starting or resuming it, and keeping it consistent.

Layout (everything written atomically)::

    config.toml  metrics.jsonl  trajectories/step_NNNN/*.json  checkpoints/step_NNNNNN/  report.html

Crash safety: a step's checkpoint (which carries the step's metrics line) is written before the
line is appended to ``metrics.jsonl``; on resume :func:`reconcile_metrics` keeps exactly the lines
of the completed steps, so no step is lost or counted twice whatever the moment of the kill.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lego.config import LegoConfig, to_toml, validate_config
from lego.errors import ConfigError
from lego.io import DirLock, DirLockedError, atomic_write_text, read_jsonl
from lego.training.checkpoint import check_compatible, load_latest, read_config

__all__ = ["KEEP_CHECKPOINTS", "RunDir", "open_run_dir", "prune_checkpoints", "reconcile_metrics"]

KEEP_CHECKPOINTS = 2


@dataclass(frozen=True)
class RunDir:
    """Paths inside a run directory (and, from :func:`open_run_dir`, the lock that keeps it to one process)."""

    root: Path
    lock: DirLock | None = field(default=None, compare=False, repr=False)

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    def trajectories(self, number: int) -> Path:
        """Trajectories of step ``number`` (1-based, as the console and checkpoints count)."""
        return self.root / "trajectories" / f"step_{number:04d}"

    def has_history(self) -> bool:
        return self.metrics.exists() or (self.root / "checkpoints").exists()


def open_run_dir(cfg: LegoConfig, resume: bool) -> tuple[RunDir, Path | None]:
    """The run directory (created, with ``config.toml``) and, on resume, its latest checkpoint.

    A fresh run refuses a directory that already holds one; ``--resume`` refuses a directory that
    holds none, and a config incompatible with the saved one."""
    root = Path(cfg.training.out_dir)
    lock = None
    if root.is_dir() or not resume:  # one process a run directory, for its whole life (train and --resume)
        try:
            lock = DirLock(root, "`lego train`")
        except DirLockedError as exc:
            raise ConfigError(str(exc)) from None
    run = RunDir(root, lock)
    ckpt = load_latest(run.root) if resume else None
    if resume:
        if not run.has_history():
            raise ConfigError(
                f"--resume: training.out_dir={run.root} holds no run to continue (no metrics.jsonl, no checkpoints/); "
                "drop --resume to start one there, or point -o training.out_dir=DIR at an existing run"
            )
        if run.config.exists():
            import tomllib

            saved = validate_config(tomllib.loads(run.config.read_text()))
            check_compatible(saved, cfg)
        if ckpt is not None:
            check_compatible(read_config(ckpt), cfg)
    elif run.has_history():
        raise ConfigError(
            f"training.out_dir={run.root} already holds a run; continue it with `lego train --resume`, "
            "or pick a new directory with -o training.out_dir=DIR"
        )
    run.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run.config, to_toml(cfg))
    return run, ckpt


def reconcile_metrics(run: RunDir, done_steps: int, last_line: dict[str, Any] | None) -> None:
    """Keep exactly the lines of completed steps 1..done_steps (the last from the checkpoint if the kill lost it)."""
    lines = [ln for ln in read_jsonl(run.metrics) if 1 <= int(ln.get("step", 0)) <= done_steps]
    if last_line is not None and done_steps > 0 and not any(int(ln["step"]) == done_steps for ln in lines):
        lines.append(last_line)
    atomic_write_text(run.metrics, "".join(json.dumps(ln) + "\n" for ln in lines))


def prune_checkpoints(run: RunDir) -> None:
    """Keep the newest ``KEEP_CHECKPOINTS`` checkpoints."""
    steps = sorted(p for p in (run.root / "checkpoints").glob("step_*") if p.is_dir())
    for old in steps[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
