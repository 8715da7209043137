"""One rollout end to end, and many at once.

A rollout = a fresh sandbox of the task + a proxy session + the harness's own process pointed at
that session → the agent's diff graded against the hidden tests in another fresh sandbox →
guards → a :class:`~lego.types.Trajectory` holding the token-exact segments the proxy recorded.

    policy = ServedPolicy.start(cfg.engine, cfg.proxy, run_dir)      # engine + chat format + proxy server
    runner = RolloutRunner(cfg, policy)
    traj = runner.run(task, "lego-agent", RolloutOptions(override_sampling=True, temperature=1.0, seed=7))

Failures are labelled, never raised: a sandbox that cannot be created is ``env_error``; a harness
that crashes is ``harness_error``. Who caused the ending is ``Trajectory.cause``, decided by
:func:`lego.conductor.verdict.attribute`: only what the policy could not have caused is ``infrastructure``
(masked out of the loss by the trainer, left out of pass@1 by eval, retried by both); whatever the
agent's commands caused is the policy's, reward 0, with the reason in ``cause_detail``. Every diff
that could be taken is graded (a ``timeout`` or ``max_turns`` rollout still gets the reward its diff
earns), and a hack the guards detect zeroes the reward unless ``guards.on_detect = "flag"``
(:func:`lego.conductor.verdict.zeroing_reasons`). When the harness returns, every process left in its sandbox
is killed before the diff is taken, so nothing the agent started can still write to the repo.

This module is the runner (one session per rollout, its verdict, many at once); the served policy is
:mod:`lego.conductor.served_policy`, the half of a rollout that needs a sandbox :mod:`lego.conductor.drive`,
and ``lego eval``'s sample function :mod:`lego.conductor.eval_samples`.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from lego.conductor.drive import DriveJob, DriveOutcome, RolloutOptions, describe_error, drive_and_grade
from lego.conductor.served_policy import ServedPolicy
from lego.conductor.stragglers import StragglerWatch
from lego.conductor.verdict import attribute, zeroing_reasons
from lego.config import LegoConfig
from lego.harnesses.base import get_harness
from lego.sandboxes.guards import agent_texts, guard_flags
from lego.seams import Harness
from lego.types import SamplingOverride, SessionSpec, Task, TerminationLabel, Trajectory

# DriveJob, DriveOutcome, RolloutOptions, drive_and_grade and ServedPolicy are named here too: a rollout's callers
# (the loop, the Ray backend, the CLI) get everything one rollout takes from this one module.
__all__ = [
    "SIDE_CALLS_PER_TURN",
    "DriveJob",
    "DriveOutcome",
    "RolloutOptions",
    "RolloutRunner",
    "ServedPolicy",
    "crashed_trajectory",
    "drive_and_grade",
    "final_label",
    "slug",
]

log = logging.getLogger("lego.conductor.rollout")

_LABEL_PRIORITY = ("overlong", "max_turns", "cut")
"""Labels the proxy decides (the policy ran out of context or turns, or was cut as a straggler) win over how the harness exited."""


SIDE_CALLS_PER_TURN = 4
"""A rollout's session serves at most ``max_turns * SIDE_CALLS_PER_TURN`` generations over all threads."""


class RolloutRunner:
    """Runs rollouts of one policy; thread-safe (each rollout has its own session and sandbox)."""

    def __init__(self, cfg: LegoConfig, policy: ServedPolicy) -> None:
        self.cfg = cfg
        self.policy = policy
        self._harnesses: dict[str, Harness] = {}

    def harness(self, name: str) -> Harness:
        """The adapter for ``name``, built with its ``harness.options[name]`` settings; cached and shared by
        concurrent rollouts, which is sound because adapters hold configuration only (per-rollout state
        travels in the :class:`~lego.seams.PreparedRun` their ``prepare`` returns)."""
        if name not in self._harnesses:
            self._harnesses[name] = get_harness(name, **self.cfg.harness.options_for(name))
        return self._harnesses[name]

    def run(
        self, task: Task, harness_name: str, opts: RolloutOptions, watch: StragglerWatch | None = None
    ) -> Trajectory:
        """One rollout of ``task`` in ``harness_name``; never raises for rollout failures (see module doc).
        ``watch``: the batch's straggler watch, which may cut this rollout's session."""
        t0 = time.monotonic()
        sid, token = self.open_session(task, harness_name, opts)
        proxy = self.policy.proxy
        if watch is not None:
            watch.started(sid)
        try:
            harness = self.harness(harness_name)
            job = DriveJob(self.cfg, task, harness_name, sid, token, opts, proxy.config)
            outcome = drive_and_grade(job, harness, proxy_uds=self.policy.model_uds)
            return self.finish(sid, harness_name, outcome, t0)
        finally:
            if watch is not None:
                watch.ended(sid)
            proxy.close_session(sid)

    def open_session(self, task: Task, harness_name: str, opts: RolloutOptions) -> tuple[str, str]:
        """Open the proxy session one rollout records into; returns its id and its model-face token (the
        harness's API key). The caller closes it.

        The gold patch enters the session only when the engine plays the answer (the oracle)."""
        sid = f"{slug(task.instance_id)}-{uuid.uuid4().hex[:10]}"
        proxy = self.policy.proxy
        spec = SessionSpec(
            sampling_override=SamplingOverride(temperature=opts.temperature) if opts.override_sampling else None,
            seed=opts.seed,
            max_turns=opts.max_turns,
            # Every thread together: the harness's side calls (titles, quota probes, subagents) fit in
            # this many per main turn, and a flood of new threads from the agent stops here.
            max_generations=opts.max_turns * SIDE_CALLS_PER_TURN,
            main_thread=self.harness(harness_name).main_thread,
            metadata={"task_id": task.instance_id, "harness": harness_name, "seed": opts.seed},
            answer=task.patch if proxy.takes_answer else None,
        )
        token = proxy.open_session(sid, spec)
        return sid, token

    def finish(self, sid: str, harness_name: str, outcome: DriveOutcome, t0: float) -> Trajectory:
        """The session's trajectory with the outcome of its drive filled in: label, cause, grade, guards,
        reward, timings.

        Runs where the proxy lives, whichever backend drove the harness (threads here, Ray workers). The
        session is sealed first: its token stops working, so nothing reaches the trajectory after this."""
        self.policy.proxy.seal_session(sid)
        traj = self.policy.proxy.trajectory(sid)
        result = outcome.result
        traj.harness, traj.policy = harness_name, self.policy.name
        traj.harness_version = outcome.harness_version
        traj.termination = final_label(traj.termination, result.reason)
        if outcome.error:
            traj.metadata["error"] = outcome.error
        traj.metadata["harness_log_tail"] = result.logs[-4000:]
        traj.counters["turns"] = float(result.turns or traj.counters.get("calls", 0.0))
        verdict = attribute(
            stage=outcome.stage,
            error=outcome.error,
            label=traj.termination,
            exit_code=result.exit_code,
            responses=int(traj.counters.get("calls", 0.0)),
            engine_unavailable=int(traj.counters.get("engine_unavailable", 0.0)),
            pristine_grades=outcome.pristine_grades,
        )
        traj.cause, traj.cause_detail = verdict.cause, verdict.detail
        traj.grade = outcome.grade  # kept for inspection whatever the verdict; the reward below is what counts
        if verdict.scored and outcome.grade is not None:
            traj.reward = outcome.grade.reward
        else:
            traj.reward = verdict.reward_if_unscored
        traj.guard_flags = guard_flags(
            history_strip=outcome.history_ok,
            egress_blocked=not self.cfg.sandbox.unsafe_no_isolation,
            excluded_files=outcome.grade.excluded_files if outcome.grade is not None else [],
            texts=self.policy_texts(traj),
        )
        zeroed_by = zeroing_reasons(traj.guard_flags, outcome.grade)
        if zeroed_by and traj.reward is not None and self.cfg.guards.on_detect == "zero":
            traj.metadata["zeroed_by"] = zeroed_by
            if traj.reward > 0:
                traj.cause_detail += f"; reward {traj.reward:g} zeroed by {', '.join(zeroed_by)}"
            traj.reward = 0.0
        traj.timings.update({"harness_s": result.wall_s, "grade_s": outcome.grade_s, "wall_s": time.monotonic() - t0})
        return traj

    def policy_texts(self, traj: Trajectory) -> list[str]:
        """Everything the policy wrote in the session, for the hack-signature scan: the main thread's
        assistant messages and the decoded sampled tokens of every segment, side threads included, so
        a command the harness later compacted out of its history, or one sent on a side thread, is
        still seen."""
        segments = [*traj.segments, *(seg for side in traj.side_threads for seg in side.segments)]
        generations: list[list[int]] = []  # runs of sampled tokens: one per generation, never joined across turns
        for seg in segments:
            run: list[int] = []
            for tok, sampled in zip(seg.response_ids, seg.response_mask, strict=True):
                if sampled:
                    run.append(tok)
                elif run:
                    generations.append(run)
                    run = []
            if run:
                generations.append(run)
        return agent_texts(traj.messages) + [self.policy.chat.decode(ids) for ids in generations]

    def run_many(
        self,
        jobs: Sequence[tuple[Task, str, RolloutOptions]],
        concurrency: int,
        on_done: Callable[[int, Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Run ``jobs`` with at most ``concurrency`` in flight; results in job order. With
        ``training.straggler_multiple`` set, the batch's stragglers are cut (:mod:`lego.conductor.stragglers`)."""
        out: list[Trajectory | None] = [None] * len(jobs)
        watch = self.straggler_watch(len(jobs))

        def one(i: int) -> None:
            task, harness, opts = jobs[i]
            try:
                traj = self.run(task, harness, opts, watch)
            except Exception as exc:  # a bug below us must not kill the whole batch: record it as infra
                log.exception("rollout %s/%s crashed", task.instance_id, harness)
                traj = crashed_trajectory(task, harness, self.policy.name, exc)
            out[i] = traj
            if on_done is not None:
                on_done(i, traj)

        with watch, ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="rollout") as pool:
            list(pool.map(one, range(len(jobs))))
        return [t for t in out if t is not None]

    def straggler_watch(self, total: int) -> StragglerWatch:
        """The straggler watch of a batch of ``total`` rollouts: off when ``training.straggler_multiple`` is 0
        or the batch has a single rollout (nothing to compare it with)."""
        multiple = self.cfg.training.straggler_multiple if total > 1 else 0.0
        return StragglerWatch(self.policy.proxy.cut_session, multiple, total)


def final_label(proxy_label: TerminationLabel, harness_reason: TerminationLabel) -> TerminationLabel:
    """The rollout's termination: the proxy's ``overlong``/``max_turns`` win over how the harness exited."""
    return proxy_label if proxy_label in _LABEL_PRIORITY else harness_reason


def crashed_trajectory(task: Task, harness: str, policy: str, exc: BaseException) -> Trajectory:
    """The ``env_error`` record of a rollout that crashed below the runner (a bug, a lost worker, the
    proxy gone): infrastructure, since no trajectory of the policy's could even be read."""
    return Trajectory(
        trajectory_id=uuid.uuid4().hex,
        session_id="",
        task_id=task.instance_id,
        harness=harness,
        policy=policy,
        termination="env_error",
        cause="infrastructure",
        cause_detail=f"the rollout crashed outside the sandbox: {describe_error(exc)}"[:300],
        metadata={"error": "".join(traceback.format_exception(exc))[-4000:]},
    )


def slug(text: str) -> str:
    """``text`` as a file or session name: runs of other characters become ``-``, at most 48."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:48]
