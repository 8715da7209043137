"""`lego bench learn`'s evaluation: policies sampled at every temperature of a sweep, compared at their best.

One eval directory per temperature (``OUT/eval/T<temperature>``, each an ordinary ``lego eval``
directory that ``lego eval report`` renders), the same held-out tasks and the same per-sample seeds
in all of them (:func:`lego.eval.results.derive_seed` does not depend on the policy or the
temperature), all samples of all temperatures through one pool of ``eval.concurrency`` threads and one
served policy per policy (:class:`lego.conductor.eval_samples.EvalPolicies`), so the engine batches
them as the training loop batches its rollouts. A rerun reuses every sample on disk: the start
policy's samples of the first sweep serve the comparison after training.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lego.config import LegoConfig
from lego.eval.results import EvalResults, EvalSpec, PolicySpec
from lego.eval.runner import EvalJob, SampleFnFactory, run_evals
from lego.eval.sweep import FairComparison, compare_sweeps
from lego.types import Task

__all__ = ["compare_policies", "outcome_grid", "run_sweep", "sweep_dir"]


def sweep_dir(out: Path, temperature: float) -> Path:
    """The eval directory of one temperature: ``OUT/T0.8``."""
    return out / f"T{temperature:g}"


def run_sweep(
    cfg: LegoConfig,
    policies: Mapping[str, str],
    tasks: Sequence[Task],
    out: Path,
    seed: int,
    factory: SampleFnFactory | None = None,
) -> tuple[dict[float, EvalResults], float]:
    """Sample every policy (name -> model) at every ``eval.temperatures`` on ``tasks`` with
    ``eval.sweep_samples`` samples each; returns the results per temperature and the wall seconds.

    ``factory`` builds each temperature's sample function (default: the production rollout through
    one shared :class:`~lego.conductor.eval_samples.EvalPolicies`, closed at the end)."""
    from lego.conductor.eval_samples import EvalPolicies, eval_sample_fn

    served = EvalPolicies(cfg) if factory is None else None
    make = factory if factory is not None else functools.partial(eval_sample_fn, policies=served)
    names = list(policies)
    by_id = {t.instance_id: t for t in tasks}
    jobs = []
    for temperature in cfg.eval.temperatures:
        spec = EvalSpec(
            policies=[PolicySpec(name=n, model=policies[n], base=names[0] if i else None) for i, n in enumerate(names)],
            harnesses=[cfg.harness.name],
            task_ids=list(by_id),
            samples=cfg.eval.sweep_samples,
            seed=seed,
            tasks_source=f"{cfg.tasks.source}:{cfg.tasks.eval_split}",
            bootstrap=cfg.eval.bootstrap,
            temperature=temperature,
            max_turns=cfg.harness.max_turns,
            timeout_s=cfg.harness.timeout_s,
        )
        where = sweep_dir(out, temperature)
        jobs.append(EvalJob(spec, make(spec, by_id, where, cfg), where))
    t0 = time.monotonic()
    try:
        results = run_evals(jobs, concurrency=cfg.eval.concurrency, infra_retries=cfg.eval.infra_retries)
    finally:
        if served is not None:
            served.close()
    return dict(zip(cfg.eval.temperatures, results, strict=True)), time.monotonic() - t0


def outcome_grid(
    results: Mapping[float, EvalResults], policy: str, task_ids: Sequence[str], samples: int
) -> np.ndarray:
    """(n_tasks, n_temperatures, n_samples) 0/1 outcomes of ``policy``; NaN where a sample is missing or
    was an infrastructure failure (left out of every score, never counted as a failure)."""
    temps = list(results)
    row = {t: i for i, t in enumerate(task_ids)}
    grid = np.full((len(task_ids), len(temps), samples), np.nan)
    for j, temperature in enumerate(temps):
        for s in results[temperature].samples:
            if s.key.policy == policy and s.key.task_id in row and s.key.sample < samples and not s.infra:
                grid[row[s.key.task_id], j, s.key.sample] = 1.0 if s.passed else 0.0
    return grid


def point_counters(results: Mapping[float, EvalResults], policy: str) -> list[dict[str, Any]]:
    """Per temperature, what the pass@1 figures leave out: infrastructure failures, terminations, turns,
    tokens and the rollout seconds of the samples. The temperatures of a sweep run in one pool, so a
    temperature's own wall time is not separable; ``sample_s_total`` (the sum of its samples' rollout
    seconds, run concurrently) is its share of the cost."""
    out = []
    for temperature, res in results.items():
        cell = next(c for c in res.cells if c.policy == policy)
        walls = [s.wall_s for s in res.samples if s.key.policy == policy]
        out.append(
            {
                "temperature": temperature,
                "pass1_all_tasks": cell.pass1,
                "ci95_all_tasks": [cell.ci_low, cell.ci_high],
                "n_tasks": cell.n_tasks,
                "n_samples": cell.n_samples,
                "n_infra": cell.n_infra,
                "terminations": cell.terminations,
                "mean_turns": cell.mean_turns,
                "mean_completion_tokens": cell.mean_completion_tokens,
                "sample_s_total": round(float(sum(walls)), 1),
                "mean_sample_s": cell.mean_wall_s,
            }
        )
    return out


def compare_policies(
    cfg: LegoConfig,
    start: str,
    trained: str,
    tasks: Sequence[Task],
    out: Path,
    seed: int,
    factory: SampleFnFactory | None = None,
) -> tuple[FairComparison, dict[str, Any]]:
    """Sweep ``start`` and ``trained`` (the start's samples already in ``out`` are reused) and compare them
    at their best temperatures (:func:`lego.eval.sweep.compare_sweeps`); returns the comparison and the
    sweep's bookkeeping (wall seconds, per-temperature counters of the trained policy)."""
    results, wall = run_sweep(cfg, {"start": start, "trained": trained}, tasks, out, seed, factory)
    ids = [t.instance_id for t in tasks]
    n = cfg.eval.sweep_samples
    comparison = compare_sweeps(
        outcome_grid(results, "start", ids, n),
        outcome_grid(results, "trained", ids, n),
        list(cfg.eval.temperatures),
        list(cfg.eval.pass_at_k),
        n_boot=cfg.eval.bootstrap,
        seed=seed,
    )
    return comparison, {"wall_s": round(wall, 1), "points": point_counters(results, "trained")}
