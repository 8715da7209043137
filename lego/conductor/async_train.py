"""The asynchronous loop behind ``training.max_staleness = k >= 1`` (``lego train``).

Rollouts run continuously (:class:`lego.conductor.async_rollouts.RolloutProducer`); each update
takes the first ``tasks_per_step`` groups whose rollouts have all ended, drops (and counts) any group
whose oldest sampled token is more than ``k`` policy versions behind the trainer, tops the batch up
from the groups that end next, trains, and pushes the weights into the engine while the next
groups keep generating: the in-process engine swaps them between two decode steps, so a rollout in
flight continues on the new weights, each token labelled with the version that sampled it.

The loss sees each token's recorded behaviour logprob, so the importance ratio is taken against
the policy that actually sampled it (``algorithm.off_policy``, :mod:`lego.algos.losses`).

Logged per update, beside the synchronous loop's metrics (the trainer's ``training/staleness_*`` and
``rollout_corr/*/lag_L`` among them, :mod:`lego.algos.fidelity`): ``async/dropped_groups``, ``async/in_flight``, ``async/wait_s`` (the trainer's wait for the batch)
(rollouts running when the batch was taken), ``async/rollouts_done`` (since start); the step closer adds ``perf/update_s`` and ``perf/engine_busy``
to every step of either loop (:mod:`lego.conductor.step_close`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from functools import partial
from typing import Any

from lego.conductor.async_rollouts import CompletedGroup, GroupLedger, GroupPlan, RolloutProducer, oldest_version
from lego.conductor.drive import RolloutOptions
from lego.conductor.rollout import crashed_trajectory
from lego.conductor.step_close import StepCloser
from lego.conductor.step_plan import canary_jobs, enough_evidence, sample_seed, step_harnesses, step_tasks
from lego.config import LegoConfig
from lego.seams import TaskSource
from lego.types import Task, Trajectory

__all__ = ["LEDGER_KEY", "group_job", "train_async"]

LEDGER_KEY = "async_groups"
"""Where a checkpoint's ``extra`` keeps the :class:`GroupLedger` of an asynchronous run."""

TAKE_SLICE_S = 0.2
"""The main thread waits for groups in slices this long, so Ctrl-C lands at once."""


def group_job(
    cfg: LegoConfig,
    tasks: Sequence[Task],
    source: TaskSource,
    g: int,
    usable: Callable[[Task], bool] | None = None,
) -> tuple[Task, str, list[RolloutOptions]]:
    """Group ``g``: task ``g % B`` of plan step ``g // B``, with the harness and per-rollout seeds the
    synchronous loop gives that task in that step."""
    b = cfg.training.tasks_per_step
    step, ti = divmod(g, b)
    picked = step_tasks(tasks, step, b, cfg.training.seed, usable)
    harness = step_harnesses(picked, cfg, step)[ti]
    opts = [
        RolloutOptions(
            override_sampling=cfg.training.sampling_override,
            temperature=cfg.algorithm.temperature,
            seed=sample_seed(cfg.training.seed, step, ti, k),
            max_turns=cfg.harness.max_turns,
            timeout_s=cfg.harness.timeout_s,
        )
        for k in range(cfg.algorithm.group_size)
    ]
    return source.materialize(picked[ti]), harness, opts


def group_lag(group: CompletedGroup, version: int) -> int:
    """How many versions behind ``version`` the group's oldest sampled token is (0: none sampled)."""
    oldest = oldest_version(group.trajectories)
    return 0 if oldest is None else version - oldest


def train_async(closer: StepCloser, tasks: Sequence[Task], source: TaskSource, ledger: GroupLedger) -> None:
    """Updates ``trainer.step_count`` .. ``training.steps - 1`` on continuously produced rollouts."""
    cfg, trainer, policy = closer.cfg, closer.trainer, closer.policy
    b, k = cfg.training.tasks_per_step, cfg.training.max_staleness
    run_one: Callable[[Task, str, RolloutOptions], Trajectory] = closer.runner.run
    if cfg.training.rollout_backend == "ray":
        from lego.conductor.ray_rollout import ray_runner

        many = ray_runner(closer.runner, cfg.training.ray_address).run_many

        def on_ray(task: Task, harness: str, opts: RolloutOptions) -> Trajectory:
            return many([(task, harness, opts)], 1)[0]

        run_one = on_ray

    def safe(task: Task, harness: str, opts: RolloutOptions) -> Trajectory:
        try:
            return run_one(task, harness, opts)
        except Exception as exc:  # a bug below us must not stop the producer: record it as infra
            return crashed_trajectory(task, harness, policy.name, exc)

    def done(t: Trajectory) -> None:
        if not closer.console.is_terminal:
            closer.console.print(
                f"rollout {producer.rollouts_done + 1}: {t.task_id} {t.harness} {t.termination} reward {t.reward}",
                soft_wrap=True,
                highlight=False,
            )

    plan = GroupPlan(b, partial(group_job, cfg, tasks, source, usable=enough_evidence(cfg, source)))
    producer = RolloutProducer(
        plan,
        safe,
        concurrency=cfg.training.concurrency,
        max_staleness=k,
        retries=cfg.training.retry_infra,
        ledger=ledger,
        on_done=done,
    )
    # the update's impossible canaries (tasks.canary_rate) run beside the producer's groups, from the
    # moment the update starts waiting for its batch; the update waits for them too (measured, never trained)
    canary_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lego-canary")
    producer.start()
    t_prev = time.monotonic()
    try:
        for step in range(trainer.step_count, cfg.training.steps):
            t0 = time.monotonic()
            shutil.rmtree(closer.run.trajectories(step + 1), ignore_errors=True)  # a step killed midway is redone
            canaries: list[Future[Trajectory]] = [
                canary_pool.submit(safe, *job) for job in canary_jobs(cfg, tasks, source, step)
            ]
            fresh: list[CompletedGroup] = []
            dropped = 0
            in_flight = 0
            while len(fresh) < b:
                got = producer.take(b - len(fresh), timeout=TAKE_SLICE_S)
                if not got:
                    continue
                in_flight = producer.in_flight
                version = policy.engine.policy_version
                stale = {grp.index for grp in got if group_lag(grp, version) > k}
                producer.consume(sorted(stale), trained=False)
                dropped += len(stale)
                fresh += [grp for grp in got if grp.index not in stale]
            fresh.sort(key=lambda grp: grp.index)
            producer.consume([grp.index for grp in fresh])
            wait_s = time.monotonic() - t0
            # the batch's tokens were sampled since the previous update ended (and before): the time its
            # rollouts had, not the wait, is what perf/rollout_s and the tokens/s rate are over
            t_roll = time.monotonic() - t_prev
            while canaries and wait_futures(canaries, timeout=TAKE_SLICE_S).not_done:
                pass  # in slices, so Ctrl-C lands at once
            trajs = [t for grp in fresh for t in grp.trajectories] + [c.result() for c in canaries]
            extra: dict[str, float] = {
                "async/dropped_groups": float(dropped),
                "async/wait_s": wait_s,
                "async/in_flight": float(in_flight),
                "async/rollouts_done": float(producer.rollouts_done),
            }  # the staleness itself (per token, against the trainer's version) comes from the trainer

            def ledger_now() -> dict[str, Any]:
                return {LEDGER_KEY: ledger.to_json()}

            closer.close(
                step, trajs, t0, t_roll, extra_metrics=extra, checkpoint_extra=ledger_now,
                policy_version=policy.engine.policy_version,
            )  # fmt: skip
            producer.updated()
            t_prev = time.monotonic()
    finally:
        producer.stop()
        canary_pool.shutdown(wait=False, cancel_futures=True)
