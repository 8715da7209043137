"""The second half of a training step, shared by the synchronous loop and the asynchronous one.

Given a step's trajectories: write them, stop the run if every one failed on infrastructure,
group-normalise the advantages, update, push the weights to the engine, validate when due,
checkpoint (the checkpoint carries the step's metrics line, written before the line is appended
to ``metrics.jsonl``, so a kill at any moment loses or doubles no step) and print the step line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from lego.algos import group_advantages
from lego.conductor.rollout import RolloutRunner, ServedPolicy
from lego.conductor.run_dir import RunDir, prune_checkpoints
from lego.conductor.step_plan import trained_harness
from lego.conductor.step_summary import canary_metrics, step_metrics, summary_line
from lego.config import LegoConfig
from lego.errors import RolloutsFailedError
from lego.io import append_jsonl, atomic_write_json, atomic_write_text
from lego.tasks.canary import is_canary
from lego.training.ranks import StepChannel
from lego.training.trainer import Trainer, items_from_trajectories
from lego.training.weight_sync import WeightSync
from lego.types import StepMetrics, Task, Trajectory

__all__ = ["StepCloser", "infra_only"]


def infra_only(step: int, trajs: Sequence[Trajectory], step_dir: Path) -> str:
    """One line on a step whose rollouts all failed on infrastructure: the most common cause, and where to look."""
    from collections import Counter

    causes = Counter(f"{t.termination}: {' '.join(t.cause_detail.split())[:240]}" for t in trajs)
    (cause, n), *_ = causes.most_common(1)
    return (
        f"step {step}: all {len(trajs)} rollouts failed on infrastructure, none because of the policy, so the run "
        f"stops untrained; {n} of them: {cause} (trajectories: {step_dir}; `lego run` reproduces one)"
    )


@dataclass
class StepCloser:
    """What closing a step needs, and what it leaves behind for the next (``saved_step``, ``last_line``)."""

    cfg: LegoConfig
    run: RunDir
    trainer: Trainer
    weights: WeightSync
    policy: ServedPolicy
    runner: RolloutRunner
    console: Console
    validate: Callable[[RolloutRunner, LegoConfig, Sequence[Task], Path], dict[str, float]]
    val_tasks: Sequence[Task] = ()
    version_base: int = 0
    on_step: Callable[[int, dict[str, float]], None] | None = None
    saved_step: int = 0
    last_line: dict[str, Any] | None = None
    ranks: StepChannel = field(default_factory=StepChannel.solo)
    """Under torchrun, how the update, the push and the checkpoint reach every rank's shard
    (:mod:`lego.training.ranks`); in one process each is the trainer's own call."""
    busy_s: float = field(default=0.0)
    """Seconds spent in updates and weight pushes so far (the trainer's busy time)."""
    closing: bool = False
    """True while :meth:`close` runs: a Ctrl-C then may find the trainer updated but its step's line
    not yet written, so only the last checkpoint stands (the loop's interrupt handler reads this)."""
    _mark: tuple[float, float] | None = field(default=None, repr=False)

    def engine_busy(self) -> dict[str, float]:
        """``perf/engine_busy``: the fraction of the wall time since the previous call in which the
        engine had a generation in flight (:class:`lego.engines.metered.MeteredEngine`); nothing on
        the first call (it sets the mark) or for a policy without a meter."""
        meter = self.policy.meter
        if meter is None:
            return {}
        now = (time.monotonic(), meter.busy_s)
        last, self._mark = self._mark, now
        if last is None or now[0] <= last[0]:
            return {}
        return {"perf/engine_busy": (now[1] - last[1]) / (now[0] - last[0])}

    def close(
        self,
        step: int,
        trajs: Sequence[Trajectory],
        t0: float,
        t_roll: float,
        extra_metrics: dict[str, float] | None = None,
        checkpoint_extra: Callable[[], dict[str, Any]] | None = None,
        policy_version: int | None = None,
    ) -> dict[str, float]:
        """Close step ``step`` (counted from 0) on ``trajs``; returns its metrics. ``policy_version``: the
        engine's version the trainer's weights are (each token's lag is counted from it)."""
        self.closing = True
        try:
            return self._close(step, trajs, t0, t_roll, extra_metrics, checkpoint_extra, policy_version)
        finally:
            self.closing = False

    def _close(
        self,
        step: int,
        trajs: Sequence[Trajectory],
        t0: float,
        t_roll: float,
        extra_metrics: dict[str, float] | None,
        checkpoint_extra: Callable[[], dict[str, Any]] | None,
        policy_version: int | None,
    ) -> dict[str, float]:
        cfg, trainer = self.cfg, self.trainer
        step_dir = self.run.trajectories(step + 1)
        for i, t in enumerate(trajs):
            atomic_write_text(step_dir / f"{i:03d}-{t.task_id}.json", t.model_dump_json())
        canaries = [t for t in trajs if is_canary(t.task_id)]  # impossible tasks: measured, never trained on
        trajs = [t for t in trajs if not is_canary(t.task_id)]
        if trajs and all(t.is_infra_failure for t in trajs):
            raise RolloutsFailedError(infra_only(step + 1, trajs, step_dir))
        advantages = group_advantages(
            [t.reward or 0.0 for t in trajs],
            [t.task_id for t in trajs],
            valid=[not t.is_infra_failure for t in trajs],
            eps=cfg.algorithm.adv_eps,
        )
        items = items_from_trajectories(trajs, advantages, side_threads=cfg.training.train_side_threads)
        t_busy = time.monotonic()
        # the asynchronous loop names the trainer's version, so a batch of stale tokens is known as stale;
        # the synchronous loop leaves it to the trainer (the batch's newest version: exact there)
        train_m = self.ranks.train_step(trainer, items, policy_version) if items else {}
        version = self.ranks.push(self.weights, trainer) if items else self.policy.engine.policy_version
        update_s = time.monotonic() - t_busy
        self.busy_s += update_s
        m = step_metrics(trajs, train_m)
        if cfg.tasks.canary_rate > 0:
            m.update(canary_metrics(canaries))
        sampled = sum(t.num_sampled_tokens for t in trajs)
        m.update(
            {
                "perf/rollout_s": t_roll,
                "perf/rollout_tokens_per_s": sampled / t_roll if t_roll else 0.0,
                "perf/step_s": time.monotonic() - t0,
                "policy/version": float(version + self.version_base),
                "train/groups_with_signal": float(sum(1 for a in advantages if a != 0.0)),
                "perf/update_s": update_s,
                **self.engine_busy(),
            }
        )
        m.update(extra_metrics or {})
        if cfg.training.eval_every and ((step + 1) % cfg.training.eval_every == 0 or step + 1 == cfg.training.steps):
            text = f"validating on {len(self.val_tasks)} {cfg.tasks.eval_split} tasks"
            if not self.console.is_terminal:
                self.console.print(f"{text} ...", soft_wrap=True, highlight=False)
            with self.console.status(text):
                out = self.run.root / "validation" / f"step_{step + 1:04d}"
                m.update(self.validate(self.runner, cfg, self.val_tasks, out))
        line = StepMetrics(step=step + 1, metrics=m, wall_s=time.monotonic() - t0).model_dump(mode="json")
        if (step + 1) % cfg.training.checkpoint_every == 0 or step + 1 == cfg.training.steps:
            path = self.checkpoint(line, checkpoint_extra)
            atomic_write_json(
                path / "lego_meta.json",
                {"trained_harness": trained_harness(cfg), "base_model": cfg.engine.model, "step": step + 1},
            )
            prune_checkpoints(self.run)
            self.saved_step = step + 1
        append_jsonl(self.run.metrics, line)
        self.last_line = line
        self.console.print(summary_line(step, cfg.training.steps, m), soft_wrap=True, highlight=False)
        if self.on_step is not None:
            self.on_step(step, m)
        return m

    def checkpoint(self, line: dict[str, Any], checkpoint_extra: Callable[[], dict[str, Any]] | None = None) -> Path:
        """Save the trainer as it is now, carrying ``line`` (its last step's metrics). LoRA checkpoints
        carry the merged weights too, so every checkpoint is a loadable model dir (`lego eval`,
        `lego bench learn`, `lego proxy --model` take it as is)."""
        extra: dict[str, Any] = {"metrics": line, **(checkpoint_extra() if checkpoint_extra else {})}
        return self.ranks.save(self.trainer, self.run.root, extra, export_merged=self.cfg.training.finetune == "lora")
