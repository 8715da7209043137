"""The RL loop behind `lego train`.

One step = B tasks × G rollouts (bounded concurrency; each a real harness process in a fresh
sandbox talking to the in-process proxy) → grade → group-normalised advantages → GSPO update on the
recorded token ids → weight sync into the engine → checkpoint → one line in ``metrics.jsonl``.

Simplifications, and why:
- ``training.ppo_epochs`` optimizer updates per batch, one by default: with one, π_old == π_θ at the
  update, so the GSPO ratio is 1 and the clip matters only off-policy, and a CPU step stays cheap;
  each further epoch reuses the batch against the weights it was sampled with
  (:meth:`lego.training.trainer.Trainer.train_step`), where the ratio and its clip act.
- The engine and the trainer hold separate copies of the weights in-process; the sync copies a
  state dict (cheap for the tiny default; for big models the vLLM path pushes through its API).
  ``lego.training.weight_sync.build_weight_sync`` picks the delivery from ``engine.kind``.

Run directory (:mod:`lego.conductor.run_dir`; ``--resume`` continues after the last checkpoint)::

    config.toml  metrics.jsonl  trajectories/step_NNNN/*.json  checkpoints/step_NNNNNN/  report.html

Steps are numbered from 1 everywhere: the console's ``step 5/20``, ``checkpoints/step_000005``,
``trajectories/step_0005`` and ``"step": 5`` in ``metrics.jsonl`` are the same step.

Ctrl-C: rollouts run on a worker thread so the main thread sees the interrupt at once; it stops the
proxy (every in-flight harness's next model call fails, so nothing new is sampled), makes sure the
last finished step has a checkpoint and raises :class:`TrainingInterrupted`, which the CLI reports
as "saved step N; continue with `lego train --resume`".

Crash safety: a step's checkpoint (which carries the step's metrics line) is written before the
line is appended to ``metrics.jsonl``; on resume the file is reconciled against the checkpoint, so
no step is lost or counted twice whatever the moment of the kill.

Under ``torchrun`` (:mod:`lego.training.ranks`): rank 0 runs everything above (:func:`_drive`);
every other rank builds its shard of the trainer and follows rank 0's commands (:func:`_follow`):
each step's update, weight push and checkpoint run on every rank on the same whole batch, so all
ranks take the same optimizer steps. The run ends with ``Stop`` to the followers, also on Ctrl-C
and on errors; a follower that dies stops rank 0 with :class:`~lego.errors.RankFailedError`.

Mixed-harness runs (``harness.weights``): :func:`step_harnesses` gives each task of a step one
harness, shared by its G rollouts; the step's metrics and console line break reward, pass rate and
fidelity down per harness (:mod:`lego.conductor.step_summary`).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lego.conductor.async_rollouts import GroupLedger
from lego.conductor.async_train import LEDGER_KEY, train_async
from lego.conductor.rollout import RolloutOptions, RolloutRunner, ServedPolicy
from lego.conductor.run_dir import RunDir, open_run_dir, reconcile_metrics
from lego.conductor.step_close import StepCloser, infra_only
from lego.conductor.step_plan import (
    canary_jobs,
    enough_evidence,
    sample_seed,
    step_harnesses,
    step_tasks,
    trained_harness,
)
from lego.config import LegoConfig
from lego.errors import RankFailedError, TaskError
from lego.io import DirLock
from lego.tasks.sources import load_tasks, pick_tasks
from lego.training import distributed as dist_utils
from lego.training.ranks import StepChannel, follow
from lego.training.trainer import Trainer
from lego.training.weight_sync import WeightSync, build_weight_sync
from lego.types import Task, Trajectory

__all__ = ["TrainingInterrupted", "infra_only", "retry_infra", "train", "validate"]

CLOSE_WAIT_S = 5.0
"""On Ctrl-C, how long to wait for the proxy and engine to close before leaving them to the process exit."""


J = TypeVar("J")


class TrainingInterrupted(Exception):
    """Ctrl-C during ``lego train``: ``saved_step`` is the last step with a checkpoint (0: none)."""

    def __init__(self, run_dir: Path, saved_step: int) -> None:
        super().__init__(f"interrupted; saved step {saved_step} in {run_dir}")
        self.run_dir = run_dir
        self.saved_step = saved_step


def _rollouts(
    runner: RolloutRunner,
    cfg: LegoConfig,
    tasks: Sequence[Task],
    step: int,
    console: Console,
    canaries: Sequence[tuple[Task, str, RolloutOptions]] = (),
) -> list[Trajectory]:
    """B × G rollouts with a progress bar, then one rollout of each canary (:mod:`lego.tasks.canary`,
    never trained on); infrastructure failures retried ``training.retry_infra`` times.

    ``training.rollout_backend`` picks where they run: threads here, or Ray tasks (:mod:`lego.conductor.ray_rollout`)."""
    run_many = runner.run_many
    if cfg.training.rollout_backend == "ray":
        from lego.conductor.ray_rollout import ray_runner

        run_many = ray_runner(runner, cfg.training.ray_address).run_many
    g = cfg.algorithm.group_size
    jobs = []
    for ti, (task, harness) in enumerate(zip(tasks, step_harnesses(tasks, cfg, step), strict=True)):
        for k in range(g):
            opts = RolloutOptions(
                override_sampling=cfg.training.sampling_override,
                temperature=cfg.algorithm.temperature,
                seed=sample_seed(cfg.training.seed, step, ti, k),
                max_turns=cfg.harness.max_turns,
                timeout_s=cfg.harness.timeout_s,
            )
            jobs.append((task, harness, opts))
    jobs += canaries
    with Progress(
        TextColumn(f"step {step + 1} rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
        transient=True,
    ) as bar:
        tid = bar.add_task("rollouts", total=len(jobs), last="")

        finished = 0
        count_lock = threading.Lock()

        def done(_: int, t: Trajectory) -> None:
            nonlocal finished
            bar.update(tid, advance=1, last=f"{t.task_id}: {t.termination} r={t.reward}")
            if not console.is_terminal:  # the bar is invisible in a log file: one plain line per rollout
                with count_lock:
                    finished += 1
                    n = finished
                console.print(
                    f"step {step + 1} rollout {n}/{len(jobs)}: {t.task_id} {t.harness} {t.termination} "
                    f"reward {t.reward}",
                    soft_wrap=True,
                    highlight=False,
                )

        def run(batch: list[tuple[Task, str, RolloutOptions]]) -> list[Trajectory]:
            return run_many(batch, cfg.training.concurrency, on_done=done)

        total = len(jobs)

        def grow(more: int) -> None:
            nonlocal total
            total += more
            bar.update(tid, total=total)

        return retry_infra(run, jobs, cfg.training.retry_infra, on_retry=grow)


def retry_infra(
    run: Callable[[list[J]], list[Trajectory]],
    jobs: Sequence[J],
    retries: int,
    on_retry: Callable[[int], None] = lambda _: None,
) -> list[Trajectory]:
    """``run(jobs)``, then each job whose rollout failed on infrastructure again, up to ``retries`` more times.

    A rerun rollout replaces the failed one and carries ``metadata["attempts"]``: how many times its
    job ran, the last run included (a rollout that succeeded at once carries none). ``on_retry(n)``
    hears of each round of ``n`` reruns before it starts."""
    trajs = run(list(jobs))
    runs = [1] * len(trajs)
    for _ in range(retries):
        again = [i for i, t in enumerate(trajs) if t.is_infra_failure]
        if not again:
            break
        on_retry(len(again))
        redo = run([jobs[i] for i in again])
        for i, t in zip(again, redo, strict=True):
            runs[i] += 1
            t.metadata["attempts"] = runs[i]
            trajs[i] = t
    return trajs


def _status(console: Console, text: str) -> Any:
    """A spinner on a terminal; off one (a log file) a plain line, since a spinner there prints nothing."""
    if not console.is_terminal:
        console.print(f"{text} ...", soft_wrap=True, highlight=False)
    return console.status(text)


def _wait_interruptibly(fn: Callable[[], list[Trajectory]]) -> list[Trajectory]:
    """Run ``fn`` on a worker thread; the main thread waits in short slices so Ctrl-C lands at once.

    The pool is not a ``with`` block: on Ctrl-C the caller must not wait for the rollouts to end."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollouts")
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    while True:
        try:
            return future.result(timeout=0.2)
        except FutureTimeout:
            continue


def _close_within(close: Callable[[], None], seconds: float) -> None:
    """Call ``close`` but give up waiting after ``seconds`` (a harness mid-request may hold it up)."""
    worker = threading.Thread(target=close, name="close-policy", daemon=True)
    worker.start()
    worker.join(seconds)


def validate(runner: RolloutRunner, cfg: LegoConfig, tasks: Sequence[Task], out_dir: Path) -> dict[str, float]:
    """Held-out pass@1 of the policy as it is now, through the eval code (one pinned harness:
    ``eval.harnesses[0]``), written under ``out_dir`` and returned as ``val/*`` metrics."""
    from lego.eval.matrix import cell_metrics
    from lego.eval.results import EvalSpec, PolicySpec, SampleKey, SampleResult
    from lego.eval.runner import run_eval

    by_id = {t.instance_id: t for t in tasks}
    spec = EvalSpec(
        policies=[PolicySpec(name="policy", model=str(out_dir.name))],
        harnesses=[cfg.eval.harnesses[0]],
        task_ids=list(by_id),
        samples=cfg.eval.samples,
        seed=cfg.eval.seed,
        temperature=cfg.eval.temperature,
        max_turns=cfg.harness.max_turns,
        timeout_s=cfg.harness.timeout_s,
        bootstrap=cfg.eval.bootstrap,
    )

    def run_sample(key: SampleKey) -> SampleResult:
        opts = RolloutOptions(
            override_sampling=True,
            temperature=spec.temperature,
            seed=key.seed,
            max_turns=spec.max_turns,
            timeout_s=spec.timeout_s,
        )
        return SampleResult.from_trajectory(key, runner.run(by_id[key.task_id], key.harness, opts))

    results = run_eval(spec, run_sample, out_dir, concurrency=cfg.eval.concurrency)
    return cell_metrics(results.cells[0], prefix="val")


def train(
    cfg: LegoConfig,
    *,
    resume: bool = False,
    console: Console | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> RunDir:
    """Run (or resume) the RL loop described by ``cfg``; returns the run directory.

    ``training.max_staleness = 0`` is the synchronous loop below; ``>= 1`` hands the steps to
    :func:`lego.conductor.async_train.train_async` (same setup, same step closing, same Ctrl-C and
    resume guarantees). ``on_step(step, metrics)`` hears of each closed step; ``on_start()`` of the
    moment the first rollout is about to start (set-up done).

    Under ``torchrun`` every rank calls this: rank 0 drives the run, the others follow it and
    return the same run directory once rank 0 sends ``Stop``."""
    dist_utils.init_from_env()
    channel = StepChannel.open()
    if not channel.is_main:
        run_dir = _follow(cfg, channel)  # an error here ends this rank; rank 0 names it
        dist_utils.shutdown()
        return run_dir
    lost = False
    try:
        with channel.watch():
            return _drive(cfg, channel, resume, console or Console(), on_step, on_start)
    except RankFailedError:
        lost = True  # a collective with a dead rank could wait forever: the others are torchrun's to end
        raise
    finally:
        if not lost and channel.stop():
            dist_utils.shutdown()  # every follower took Stop: all ranks leave the group together


def _follow(cfg: LegoConfig, channel: StepChannel) -> RunDir:
    """A follower rank: its shard of the trainer, rank 0's commands until ``Stop``. Ctrl-C reaches
    every process of the terminal; rank 0 alone decides what it means (a checkpoint, then ``Stop``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    follow(channel, Trainer.from_config(cfg))
    return RunDir(Path(cfg.training.out_dir))


def _drive(
    cfg: LegoConfig,
    channel: StepChannel,
    resume: bool,
    console: Console,
    on_step: Callable[[int, dict[str, float]], None] | None,
    on_start: Callable[[], None] | None,
) -> RunDir:
    """The run itself, on rank 0 (the only process without torchrun)."""
    run, ckpt = open_run_dir(cfg, resume)
    t_setup = time.monotonic()
    extra: dict[str, Any] = {}
    try:
        with _status(console, "loading the policy, the trainer and the tasks"):
            # records now, each repo when a step picks it: a 1000-task split costs no minute of git up front
            tasks, source = pick_tasks(
                cfg.tasks.split_spec(cfg.tasks.split), cfg.tasks.where, cfg.tasks.limit, cfg.tasks.skip_bad_lines
            )
            trainer = Trainer.from_config(cfg)
            last_line = None
            if ckpt is not None:
                extra = channel.restore(trainer, ckpt)
                last_line = extra.get("metrics")
            reconcile_metrics(run, trainer.step_count, last_line)
            policy = ServedPolicy.start(cfg.engine, cfg.proxy, name="policy")
    except BaseException:
        # A run that never started (the model refused, the tasks missing) leaves no directory that
        # `--resume` would then mistake for a run: only what open_run_dir wrote is removed.
        if run.lock is not None:
            run.lock.release()
        if ckpt is None and {p.name for p in run.root.iterdir()} <= {"config.toml", "metrics.jsonl", DirLock.NAME}:
            shutil.rmtree(run.root, ignore_errors=True)
        raise
    weights: WeightSync | None = None
    interrupted = in_rollouts = False
    ledger = GroupLedger.from_json(extra.get(LEDGER_KEY))
    closer: StepCloser | None = None
    try:
        weights = build_weight_sync(cfg.engine, policy.engine)  # engine.kind picks how weights travel
        # policy/version counts weight updates over the whole run: the engine restarts at 0 on resume
        version_base = 0
        if trainer.step_count:
            version_base = trainer.step_count - channel.push(weights, trainer)
            console.print(f"resumed {run.root} after step {trainer.step_count} ({ckpt})")
        mode = f", asynchronous (max_staleness {cfg.training.max_staleness})" if cfg.training.max_staleness else ""
        ready = (
            f"ready in {time.monotonic() - t_setup:.1f}s: {len(tasks)} {cfg.tasks.split} tasks, "
            f"{cfg.training.tasks_per_step}×{cfg.algorithm.group_size} rollouts/step{mode}, harness "
            f"{trained_harness(cfg)}, out {run.root}"
        )
        console.print(ready, soft_wrap=True, highlight=False)
        runner = RolloutRunner(cfg, policy)
        val_tasks: list[Task] = []
        if cfg.training.eval_every:
            val_tasks = load_tasks(
                cfg.tasks.split_spec(cfg.tasks.eval_split), cfg.tasks.where, cfg.eval.limit, cfg.tasks.skip_bad_lines
            )
        closer = StepCloser(
            cfg, run, trainer, weights, policy, runner, console, validate, val_tasks, version_base, on_step,
            saved_step=trainer.step_count, last_line=last_line, ranks=channel,
        )  # fmt: skip
        closer.engine_busy()  # the mark the first step's perf/engine_busy is measured from
        if on_start is not None:
            on_start()
        if cfg.training.max_staleness:
            in_rollouts = True  # the producer has rollouts in flight all along; closer.closing marks the updates
            train_async(closer, tasks, source, ledger)
        else:
            usable = enough_evidence(cfg, source)
            for step in range(trainer.step_count, cfg.training.steps):
                # ``step`` counts from 0 (seeds, task order); what is written and shown is ``step + 1``
                t0 = time.monotonic()
                shutil.rmtree(run.trajectories(step + 1), ignore_errors=True)  # a step killed midway is redone
                picked = step_tasks(tasks, step, cfg.training.tasks_per_step, cfg.training.seed, usable)
                if not picked:
                    raise TaskError(
                        f"no task of {cfg.tasks.split_spec(cfg.tasks.split)} rests on witnessed behaviour for at least "
                        f"{cfg.tasks.min_behavioural_evidence:.0%} of its FAIL_TO_PASS tests (`lego tasks validate` "
                        "prints each task's share); lower tasks.min_behavioural_evidence, or 0 to keep every task"
                    )
                ready_tasks = [source.materialize(t) for t in picked]
                canaries = canary_jobs(cfg, tasks, source, step)
                in_rollouts = True
                trajs = _wait_interruptibly(partial(_rollouts, runner, cfg, ready_tasks, step, console, canaries))
                in_rollouts = False
                closer.close(step, trajs, t0, time.monotonic() - t0)
    except KeyboardInterrupt:
        interrupted = True
        console.print("interrupted: stopping the proxy; in-flight rollouts are dropped", highlight=False)
        saved_step = trainer.step_count if closer is None else closer.saved_step
        # checkpoint_every > 1: keep the last finished step. Only from the rollouts: a Ctrl-C inside the
        # update may leave the trainer half-stepped, and then the last checkpoint is what stands.
        finished = closer is not None and in_rollouts and not closer.closing
        if finished and closer is not None and trainer.step_count > saved_step and closer.last_line is not None:
            closer.checkpoint(closer.last_line, lambda: {LEDGER_KEY: ledger.to_json()})
            saved_step = trainer.step_count
        raise TrainingInterrupted(run.root, saved_step) from None
    except RankFailedError:
        interrupted = True  # harnesses may be mid-request: close without waiting on them
        raise
    finally:
        if weights is not None:
            weights.close()
        if interrupted:
            _close_within(policy.close, CLOSE_WAIT_S)
        else:
            policy.close()
        if run.lock is not None:
            run.lock.release()  # the run directory is free for the next process (or this one's --resume)
    return run
