"""Run every sample of an :class:`EvalSpec` through an injected ``run_sample`` callable, with bounded
concurrency, resumably.

The runner knows nothing about engines, harnesses or sandboxes: ``run_sample(key) -> SampleResult``
does one rollout (the lead's ``lego.conductor.eval_samples`` in production; any deterministic function in tests).
What the runner owns is the bookkeeping that makes an eval trustworthy:

- every finished sample is written atomically to its own JSON file (:func:`lego.eval.results.sample_path`)
  the moment it finishes, so a killed eval loses at most the samples in flight;
- a rerun loads the files that exist and runs only what is missing; every sample's seed comes from
  its key (:func:`lego.eval.results.derive_seed`), so a resumed eval equals an uninterrupted one;
- a sample that ends in an infrastructure failure (or whose callable raises) is retried up to
  ``infra_retries`` times, then recorded with ``infra=True`` — reported separately, never scored 0.
  A rerun keeps recorded infra samples unless ``retry_recorded_infra`` is set.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lego.config import LegoConfig
from lego.errors import ConfigError, ResumeError
from lego.eval.matrix import summarize
from lego.eval.results import EvalResults, EvalSpec, SampleKey, SampleResult, load_sample, sample_path, save_results
from lego.io import DirLock, DirLockedError, atomic_write_json
from lego.types import Task

__all__ = ["EvalJob", "SampleFn", "SampleFnFactory", "collect_samples", "run_eval", "run_evals"]

SampleFn = Callable[[SampleKey], SampleResult]


class SampleFnFactory(Protocol):
    """What ``lego eval --sample-fn MODULE:ATTR`` names: builds ``run_sample`` for one eval.

    ``tasks`` maps ``instance_id`` to the task record; ``cfg`` is the eval's whole configuration (engine,
    proxy, sandbox and harness settings: a ``--from-run`` eval's are the run's own); ``out_dir`` is the eval directory (a place
    to save full trajectories, e.g. ``out_dir/trajectories/...``, referenced by
    ``SampleResult.trajectory_path``). ``run_sample`` must be safe to call from several threads, use
    ``key.seed`` for all its randomness, and return ``SampleResult(key=key, ...)`` — typically
    :meth:`SampleResult.from_trajectory`. It may raise; the runner records that as an infra failure.
    """

    def __call__(self, spec: EvalSpec, tasks: Mapping[str, Task], out_dir: Path, cfg: LegoConfig) -> SampleFn: ...


def _check_spec(out_dir: Path, spec: EvalSpec) -> None:
    """Refuse to resume into a directory whose samples were seeded or loaded differently.

    Adding policies, harnesses, tasks or samples to an existing directory is allowed (the matrix
    grows); changing the seed, the sampling temperature, the rollout limits or what a policy name
    loads would mix incomparable samples.
    """
    path = out_dir / "spec.json"
    if path.is_file():
        old = EvalSpec.model_validate_json(path.read_text(encoding="utf-8"))
        for field, flag in (("seed", "--seed"), ("temperature", "--temperature"), ("max_turns", "--max-turns"),
                            ("timeout_s", "--timeout")):  # fmt: skip
            was, now = getattr(old, field), getattr(spec, field)
            if was != now:
                raise ResumeError(f"{out_dir} was run with {flag} {was}, not {now}; use that value or a new --out")
        old_models = {p.name: p.model for p in old.policies}
        for p in spec.policies:
            if p.name in old_models and old_models[p.name] != p.model:
                raise ResumeError(
                    f"{out_dir}: policy {p.name!r} was {old_models[p.name]!r}, now {p.model!r}; "
                    "give it another name or use a new --out"
                )
        # Every name the directory has samples of stays on record, not only this run's: a later run
        # that reuses an earlier name for another model is refused too.
        names = {p.name for p in spec.policies}
        spec = spec.model_copy(update={"policies": [*(p for p in old.policies if p.name not in names), *spec.policies]})
    atomic_write_json(path, spec.model_dump(mode="json"), indent=1)


def collect_samples(out_dir: str | Path, spec: EvalSpec) -> dict[SampleKey, SampleResult]:
    """The samples of ``spec`` already on disk under ``out_dir``."""
    done: dict[SampleKey, SampleResult] = {}
    for key in spec.keys():
        path = sample_path(out_dir, key)
        if path.is_file():
            result = load_sample(path)
            if result.key == key:
                done[key] = result
    return done


def _run_one(key: SampleKey, run_sample: SampleFn, infra_retries: int) -> SampleResult:
    attempts = 0
    while True:
        attempts += 1
        try:
            result = run_sample(key)
        except Exception as exc:  # a crashed rollout is an infrastructure failure; keep the eval going
            result = SampleResult.infra_failure(key, "".join(traceback.format_exception(exc)), attempts)
        if result.key != key:
            raise ValueError(f"run_sample returned a result for {result.key}, asked for {key}")
        if not result.infra or attempts > infra_retries:
            return result.model_copy(update={"attempts": attempts})


@dataclass(frozen=True)
class EvalJob:
    """One eval of :func:`run_evals`: its spec, the function that runs its samples, its directory."""

    spec: EvalSpec
    run_sample: SampleFn
    out_dir: Path


def run_eval(
    spec: EvalSpec,
    run_sample: SampleFn,
    out_dir: str | Path,
    concurrency: int = 4,
    infra_retries: int = 1,
    retry_recorded_infra: bool = False,
    on_sample: Callable[[SampleResult], None] | None = None,
) -> EvalResults:
    """Run the samples of ``spec`` missing from ``out_dir``, then write ``results.json``.

    ``run_sample`` is called from up to ``concurrency`` threads at once. ``on_sample`` (e.g. a
    progress bar) is called after each new sample is saved. Returns the summaries of every sample
    of the spec, old and new. Rendering (CSV, Markdown, PNG, HTML) is :func:`lego.eval.report.render`.
    """
    job = EvalJob(spec, run_sample, Path(out_dir))
    return run_evals([job], concurrency, infra_retries, retry_recorded_infra, on_sample)[0]


def run_evals(
    jobs: Sequence[EvalJob],
    concurrency: int = 4,
    infra_retries: int = 1,
    retry_recorded_infra: bool = False,
    on_sample: Callable[[SampleResult], None] | None = None,
) -> list[EvalResults]:
    """:func:`run_eval` for several evals through one pool of ``concurrency`` threads (e.g. one eval per
    temperature of a sweep), so the policy's engine keeps a full batch until the last sample of the
    last eval rather than draining at the end of each.

    Samples are queued task by task (every eval's samples of the first task, then of the second, ...):
    like the G rollouts of a training group, the samples in flight share their task's prompt prefix.
    Returns the results of each job, in order."""
    outs = [Path(j.out_dir) for j in jobs]
    locks = []
    try:  # one process an eval directory: a second `lego eval --out` into it is refused, naming the holder
        for out in dict.fromkeys(o.resolve() for o in outs):
            locks.append(DirLock(out, "`lego eval`"))
    except DirLockedError as exc:
        for lock in locks:
            lock.release()
        raise ConfigError(str(exc)) from None
    try:
        return _run_evals(jobs, outs, concurrency, infra_retries, retry_recorded_infra, on_sample)
    finally:
        for lock in locks:
            lock.release()


def _run_evals(
    jobs: Sequence[EvalJob],
    outs: list[Path],
    concurrency: int,
    infra_retries: int,
    retry_recorded_infra: bool,
    on_sample: Callable[[SampleResult], None] | None,
) -> list[EvalResults]:
    done: list[dict[SampleKey, SampleResult]] = []
    queue: list[tuple[str, int, int, SampleKey]] = []
    for i, (job, out) in enumerate(zip(jobs, outs, strict=True)):
        out.mkdir(parents=True, exist_ok=True)
        _check_spec(out, job.spec)
        have = collect_samples(out, job.spec)
        done.append(have)
        queue += [
            (k.task_id, i, k.sample, k)
            for k in job.spec.keys()
            if k not in have or (retry_recorded_infra and have[k].infra)
        ]
    queue.sort(key=lambda q: q[:3])
    lock = threading.Lock()

    def task(i: int, key: SampleKey) -> None:
        result = _run_one(key, jobs[i].run_sample, infra_retries)
        atomic_write_json(sample_path(outs[i], key), result.model_dump(mode="json"), indent=1)
        with lock:
            done[i][key] = result
            if on_sample is not None:
                on_sample(result)

    if queue:
        pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="lego-eval")
        try:
            futures = [pool.submit(task, i, k) for _, i, _, k in queue]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            errors = [e for f in finished if (e := f.exception()) is not None]
            if errors:
                raise errors[0]
        finally:
            # On an error or Ctrl-C: samples in flight finish and are saved; queued ones are dropped
            # (a rerun picks them up).
            pool.shutdown(wait=True, cancel_futures=True)
    results = []
    for job, out, have in zip(jobs, outs, done, strict=True):
        results.append(summarize(job.spec, list(have.values())))
        save_results(out, results[-1])
    return results
