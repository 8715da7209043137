"""`lego bench learn`'s evaluation: policies sampled at every temperature of a sweep, compared at their best.

One eval directory per temperature (``OUT/eval/T<temperature>``, each an ordinary ``lego eval``
directory that ``lego eval report`` renders), the same held-out tasks and the same per-sample seeds
in all of them (:func:`lego.eval.results.derive_seed` does not depend on the policy or the
temperature), all samples of all temperatures through one pool of ``eval.concurrency`` threads and one
served policy per policy (:class:`lego.conductor.eval_samples.EvalPolicies`), so the engine batches
them as the training loop batches its rollouts. A rerun reuses every sample on disk: the start
policy's samples of the first sweep serve the comparison after training.

Two stages: the sweep (``eval.sweep_samples`` per task at every temperature) chooses each policy's best
temperature; the confirm stage then draws ``eval.confirm_samples`` more per task at that temperature
only (sample numbers after the sweep's, so new seeds), on which best-vs-best and pass@k are scored
without selection bias. Four temperatures x 8 samples cost 32 samples per task and policy; 4 x 2 + 8
cost 16.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lego.conductor.evaluate import SampleProgress
from lego.config import LegoConfig
from lego.eval.results import EvalResults, EvalSpec, PolicySpec
from lego.eval.runner import EvalJob, SampleFnFactory, collect_samples, run_evals
from lego.eval.sweep import ConfirmGrids, FairComparison, compare_sweeps
from lego.types import Task

__all__ = [
    "best_temperature",
    "compare_policies",
    "outcome_grid",
    "run_confirm",
    "run_sweep",
    "sample_grid",
    "sweep_dir",
]


def sweep_dir(out: Path, temperature: float) -> Path:
    """The eval directory of one temperature: ``OUT/T0.8``."""
    return out / f"T{temperature:g}"


def _run_cells(
    cfg: LegoConfig,
    cells: Sequence[tuple[Mapping[str, str], float, int]],
    tasks: Sequence[Task],
    out: Path,
    seed: int,
    factory: SampleFnFactory | None,
) -> tuple[list[EvalResults], float]:
    """Run every cell (policies name -> model, temperature, samples per task) through one pool and one
    served policy per model; returns each cell's results and the wall seconds."""
    from lego.conductor.eval_samples import EvalPolicies, eval_sample_fn

    served = EvalPolicies(cfg) if factory is None else None
    make = factory if factory is not None else functools.partial(eval_sample_fn, policies=served)
    by_id = {t.instance_id: t for t in tasks}
    jobs = []
    for policies, temperature, samples in cells:
        names = list(policies)
        spec = EvalSpec(
            policies=[PolicySpec(name=n, model=policies[n], base=names[0] if i else None) for i, n in enumerate(names)],
            harnesses=[cfg.harness.name],
            task_ids=list(by_id),
            samples=samples,
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
    missing = sum(len(job.spec.keys()) - len(collect_samples(job.out_dir, job.spec)) for job in jobs)
    try:
        results = run_evals(
            jobs,
            concurrency=cfg.eval.concurrency,
            infra_retries=cfg.eval.infra_retries,
            on_sample=SampleProgress(missing) if missing else None,
        )
    finally:
        if served is not None:
            served.close()
    return results, time.monotonic() - t0


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
    temps = list(cfg.eval.temperatures)
    cells = [(policies, t, cfg.eval.sweep_samples) for t in temps]
    results, wall = _run_cells(cfg, cells, tasks, out, seed, factory)
    return dict(zip(temps, results, strict=True)), wall


def best_temperature(results: Mapping[float, EvalResults], policy: str, task_ids: Sequence[str], samples: int) -> float:
    """The temperature of the sweep where ``policy``'s pass@1 is highest, over the tasks it has a scored
    sample of at every temperature (the lowest temperature on a tie)."""
    grid = outcome_grid(results, policy, task_ids, samples)
    scored = (~np.isnan(grid)).any(axis=2).all(axis=1)
    if not scored.any():
        return min(results)
    means = np.nanmean(grid[scored], axis=2).mean(axis=0)
    return list(results)[int(np.argmax(means))]


def run_confirm(
    cfg: LegoConfig,
    chosen: Mapping[str, tuple[str, float]],
    tasks: Sequence[Task],
    out: Path,
    seed: int,
    factory: SampleFnFactory | None = None,
) -> tuple[dict[str, EvalResults], float]:
    """The confirm stage: each policy (name -> (model, its chosen temperature)) gets
    ``eval.confirm_samples`` more samples per task at its temperature, numbered after the sweep's (so
    their per-sample seeds are new), in that temperature's eval directory. Samples on disk are reused.
    Returns each policy's results there and the wall seconds."""
    by_temp: dict[float, dict[str, str]] = {}
    for name, (model, temperature) in chosen.items():
        by_temp.setdefault(temperature, {})[name] = model
    samples = cfg.eval.sweep_samples + cfg.eval.confirm_samples
    cells = [(policies, t, samples) for t, policies in by_temp.items()]
    results, wall = _run_cells(cfg, cells, tasks, out, seed, factory)
    per_temp = dict(zip(by_temp, results, strict=True))
    return {name: per_temp[temperature] for name, (_, temperature) in chosen.items()}, wall


def sample_grid(results: EvalResults, policy: str, task_ids: Sequence[str], first: int, n: int) -> np.ndarray:
    """(n_tasks, n) 0/1 outcomes of ``policy``'s samples ``first`` .. ``first + n - 1`` in one eval; NaN
    where a sample is missing or was an infrastructure failure (left out of every score, never counted
    as a failure)."""
    row = {t: i for i, t in enumerate(task_ids)}
    grid = np.full((len(task_ids), n), np.nan)
    for s in results.samples:
        if s.key.policy == policy and s.key.task_id in row and first <= s.key.sample < first + n and not s.infra:
            grid[row[s.key.task_id], s.key.sample - first] = 1.0 if s.passed else 0.0
    return grid


def outcome_grid(
    results: Mapping[float, EvalResults], policy: str, task_ids: Sequence[str], samples: int
) -> np.ndarray:
    """(n_tasks, n_temperatures, n_samples): :func:`sample_grid` of samples 0 .. ``samples - 1`` at every
    temperature of the sweep."""
    return np.stack([sample_grid(res, policy, task_ids, 0, samples) for res in results.values()], axis=1)


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
    name: str = "trained",
) -> tuple[FairComparison, dict[str, Any]]:
    """Sweep ``start`` and ``trained``, then (``eval.confirm_samples`` > 0) draw each one's confirm samples
    at its best temperature, and compare them (:func:`lego.eval.sweep.compare_sweeps`). The start's
    samples already in ``out`` are reused, so several trained policies can share one ``out``, each
    under its own ``name`` (a name loads one model per directory). Returns the comparison and the bookkeeping (wall seconds of
    the sweep and the confirm stage, per-temperature counters of the trained policy)."""
    results, wall = run_sweep(cfg, {"start": start, name: trained}, tasks, out, seed, factory)
    ids = [t.instance_id for t in tasks]
    n = cfg.eval.sweep_samples
    info: dict[str, Any] = {"wall_s": round(wall, 1), "points": point_counters(results, name)}
    confirm = None
    if cfg.eval.confirm_samples:
        tb, ta = best_temperature(results, "start", ids, n), best_temperature(results, name, ids, n)
        chosen, cwall = run_confirm(cfg, {"start": (start, tb), name: (trained, ta)}, tasks, out, seed, factory)
        m = cfg.eval.confirm_samples
        confirm = ConfirmGrids(
            tb,
            ta,
            sample_grid(chosen["start"], "start", ids, n, m),
            sample_grid(chosen[name], name, ids, n, m),
        )
        info.update(confirm_wall_s=round(cwall, 1), confirm_temperature=ta)
    comparison = compare_sweeps(
        outcome_grid(results, "start", ids, n),
        outcome_grid(results, name, ids, n),
        list(cfg.eval.temperatures),
        list(cfg.eval.pass_at_k),
        n_boot=cfg.eval.bootstrap,
        seed=seed,
        confirm=confirm,
    )
    return comparison, info
