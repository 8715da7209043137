"""One rollout end to end, and many at once.

A rollout = a fresh sandbox of the task + a proxy session + the harness's own process pointed at
that session → the agent's diff graded against the hidden tests in another fresh sandbox →
guards → a :class:`~lego.types.Trajectory` holding the token-exact segments the proxy recorded.

    policy = Policy.start(cfg.engine, cfg.proxy, run_dir)      # engine + chat format + proxy server
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
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lego.conductor.verdict import DriveStage, attribute, zeroing_reasons
from lego.config import EngineConfig, LegoConfig, ProxyConfig
from lego.engines import build_engine
from lego.engines.base import Engine
from lego.errors import LegoError
from lego.harnesses.base import get_harness
from lego.models.chat import ChatFormat
from lego.proxies.server import ProxyServer, session_endpoint
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.grading import grade
from lego.sandboxes.guards import agent_texts, guard_flags
from lego.seams import Harness
from lego.types import (
    GradeResult,
    HarnessLimits,
    HarnessResult,
    Task,
    TerminationLabel,
    Trajectory,
)

__all__ = [
    "ORACLE_MAX_TOKENS",
    "SIDE_CALLS_PER_TURN",
    "DriveOutcome",
    "Policy",
    "RolloutOptions",
    "RolloutRunner",
    "crashed_trajectory",
    "drive_and_grade",
    "eval_sample_fn",
    "final_label",
    "oracle_config",
]

log = logging.getLogger("lego.conductor.rollout")

LOG_CHARS = 2000
_LABEL_PRIORITY = ("overlong", "max_turns")
"""Labels the proxy decides (the policy ran out of context or turns) win over how the harness exited."""


@dataclass
class Policy:
    """A served policy: its engine, its chat format and the recording proxy in front of it.

    The proxy's control face listens on a Unix socket in a private temp dir (the trainer's side:
    sessions are opened, read and closed there); sandboxes bind only its model face
    (:attr:`model_uds`), where a session's token reaches that session's model routes and nothing else.
    """

    name: str
    engine: Engine
    chat: ChatFormat
    proxy: ProxyServer
    model_path: Path | None
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, engine_cfg: EngineConfig, proxy_cfg: ProxyConfig, name: str = "policy") -> Policy:
        """Build the engine named by ``engine_cfg`` (``lego.engines.build_engine``) and start a proxy."""
        from lego.models.tiny import resolve_model  # torch: imported here, so Ray workers (drive only) stay light

        model_path = resolve_model(engine_cfg.model)
        chat = ChatFormat.from_pretrained(model_path, engine_cfg.chat_template, engine_cfg.tool_parser)
        engine = build_engine(engine_cfg)
        tmp = tempfile.TemporaryDirectory(prefix="lego-proxy-")
        # Strict: rollouts open every session explicitly, so a request naming any other is a bug or an
        # attack, answered 404 rather than recorded into a session of its own making.
        cfg = proxy_cfg.model_copy(update={"uds": str(Path(tmp.name) / "proxy.sock"), "strict_sessions": True})
        proxy = ProxyServer(engine, chat, cfg)
        proxy.start()
        return cls(name=name, engine=engine, chat=chat, proxy=proxy, model_path=model_path, _tmp=tmp)

    @property
    def model_uds(self) -> Path:
        """The model face's socket: the only proxy socket a sandbox is given."""
        return Path(self.proxy.model_uds)

    def close(self) -> None:
        self.proxy.stop()
        asyncio.run(self.engine.close())
        if self._tmp is not None:
            self._tmp.cleanup()


@dataclass(frozen=True)
class RolloutOptions:
    """How one rollout samples and when it must stop.

    ``override_sampling``: the proxy samples at ``temperature`` with no top-p/top-k truncation, whatever
    the harness asks (as training needs, and as eval uses so every harness samples alike); False lets
    the harness choose. ``seed`` makes the session's sampling reproducible."""

    override_sampling: bool = True
    temperature: float = 1.0
    seed: int = 0
    max_turns: int = 30
    timeout_s: float = 600.0


SIDE_CALLS_PER_TURN = 4
"""A rollout's session serves at most ``max_turns * SIDE_CALLS_PER_TURN`` generations over all threads."""


class RolloutRunner:
    """Runs rollouts of one policy; thread-safe (each rollout has its own session and sandbox)."""

    def __init__(self, cfg: LegoConfig, policy: Policy) -> None:
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

    def run(self, task: Task, harness_name: str, opts: RolloutOptions) -> Trajectory:
        """One rollout of ``task`` in ``harness_name``; never raises for rollout failures (see module doc)."""
        t0 = time.monotonic()
        sid, token = self.open_session(task, harness_name, opts)
        proxy = self.policy.proxy
        try:
            harness = self.harness(harness_name)
            outcome = drive_and_grade(
                self.cfg, task, harness, sid, token, opts, proxy_uds=self.policy.model_uds, proxy_cfg=proxy.config
            )
            return self.finish(sid, harness_name, outcome, t0)
        finally:
            proxy.close_session(sid)

    def open_session(self, task: Task, harness_name: str, opts: RolloutOptions) -> tuple[str, str]:
        """Open the proxy session one rollout records into; returns its id and its model-face token (the
        harness's API key). The caller closes it.

        The gold patch enters the session only when the engine plays the answer (the oracle)."""
        sid = f"{_slug(task.instance_id)}-{uuid.uuid4().hex[:10]}"
        proxy = self.policy.proxy
        token = proxy.open_session(
            sid,
            metadata={"task_id": task.instance_id, "harness": harness_name, "seed": opts.seed},
            answer=task.patch if proxy.takes_answer else None,
            training=opts.override_sampling,
            temperature=opts.temperature,
            max_turns=opts.max_turns,
            # Every thread together: the harness's side calls (titles, quota probes, subagents) fit in
            # this many per main turn, and a flood of new threads from the agent stops here.
            max_generations=opts.max_turns * SIDE_CALLS_PER_TURN,
            main_thread=self.harness(harness_name).main_thread,
        )
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
        """Run ``jobs`` with at most ``concurrency`` in flight; results in job order."""
        out: list[Trajectory | None] = [None] * len(jobs)

        def one(i: int) -> None:
            task, harness, opts = jobs[i]
            try:
                traj = self.run(task, harness, opts)
            except Exception as exc:  # a bug below us must not kill the whole batch: record it as infra
                log.exception("rollout %s/%s crashed", task.instance_id, harness)
                traj = crashed_trajectory(task, harness, self.policy.name, exc)
            out[i] = traj
            if on_done is not None:
                on_done(i, traj)

        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="rollout") as pool:
            list(pool.map(one, range(len(jobs))))
        return [t for t in out if t is not None]


@dataclass
class DriveOutcome:
    """What driving one rollout produced where its sandbox ran (picklable: Ray workers return it).

    ``stage`` is the step that failed (``done`` when none did); ``diff`` is None when no diff was
    taken; ``grade`` is None when the diff was not graded; ``error`` is the text recorded as
    ``metadata["error"]``; ``pristine_grades``, after a grading failure only, says whether the
    pristine repo (an empty diff) grades: whether the agent's diff caused the failure."""

    result: HarnessResult
    diff: str | None
    history_ok: bool
    error: str
    stage: DriveStage = "done"
    grade: GradeResult | None = None
    grade_s: float = 0.0
    pristine_grades: bool | None = None
    harness_version: str = "unknown"

    @classmethod
    def failed(
        cls, stage: DriveStage, error: str, history_ok: bool = False, result: HarnessResult | None = None
    ) -> DriveOutcome:
        """A drive that stopped at ``stage`` with no diff (``result``: how the harness ended, if it ran)."""
        reason: TerminationLabel = "env_error" if stage == "sandbox" else "harness_error"
        result = result or HarnessResult(exit_code=None, reason=reason, logs=error[-LOG_CHARS:])
        return cls(result, None, history_ok, error[-LOG_CHARS:], stage=stage)


def final_label(proxy_label: TerminationLabel, harness_reason: TerminationLabel) -> TerminationLabel:
    """The rollout's termination: the proxy's ``overlong``/``max_turns`` win over how the harness exited."""
    return proxy_label if proxy_label in _LABEL_PRIORITY else harness_reason


def drive_and_grade(
    cfg: LegoConfig,
    task: Task,
    harness: Harness,
    sid: str,
    token: str,
    opts: RolloutOptions,
    *,
    proxy_uds: Path,
    proxy_cfg: ProxyConfig,
) -> DriveOutcome:
    """Sandbox → prepare → run → kill the agent's processes → diff → grade, for the proxy session ``sid``
    reached at ``proxy_uds`` (the model face, or a forwarder to it) with its token ``token``.

    The half of a rollout that needs a sandbox; both backends run it (the threads backend in-process,
    the Ray backend on a worker, with ``proxy_uds`` a local forwarder to the driver's proxy). Every diff
    that was taken is graded: whether the grade counts is decided where the proxy lives
    (:meth:`RolloutRunner.finish`). When grading fails, the pristine repo is graded too, so the
    verdict can tell a broken task from a diff that breaks the grader. ``proxy_cfg`` is the serving
    proxy's config (model name, API key for the harness's endpoint)."""
    outcome = _drive(cfg, task, harness, sid, token, opts, proxy_uds, proxy_cfg)
    outcome.harness_version = _safe_version(harness)
    if outcome.diff is not None:
        t_grade = time.monotonic()
        try:
            outcome.grade = grade(task, outcome.diff, cfg=cfg.sandbox)
        except Exception as exc:  # the agent's diff reaches grading: what it breaks there is attributed, not raised
            outcome.stage, outcome.error = "grade", _describe(exc)
            outcome.pristine_grades = _pristine_grades(task, cfg)
        outcome.grade_s = time.monotonic() - t_grade
    return outcome


def _pristine_grades(task: Task, cfg: LegoConfig) -> bool:
    """Whether ``task``'s pristine repo (an empty diff) grades without error."""
    try:
        grade(task, "", cfg=cfg.sandbox)
    except Exception:  # the answer is the point: any failure means the task or the grader is broken
        return False
    return True


def _drive(
    cfg: LegoConfig,
    task: Task,
    harness: Harness,
    sid: str,
    token: str,
    opts: RolloutOptions,
    proxy_uds: Path,
    proxy_cfg: ProxyConfig,
) -> DriveOutcome:
    """Sandbox → prepare → run → kill → diff; each failure is recorded with its stage, never raised.

    From the harness's launch on, the agent's commands can break anything in the sandbox, so every
    exception there is caught and attributed later (:func:`lego.conductor.verdict.attribute`)."""
    ro_binds = harness.ro_binds()
    # Bun-built harnesses reserve GBs of address space at start and die at random under less
    memory_mb = max(cfg.sandbox.memory_mb, harness.min_memory_mb)
    sandbox_cfg = cfg.sandbox.model_copy(update={"memory_mb": memory_mb})
    try:
        sandbox = create_sandbox(sandbox_cfg, task, proxy_uds=proxy_uds, ro_binds=ro_binds)
    except LegoError as exc:
        return DriveOutcome.failed("sandbox", _describe(exc))
    try:
        try:
            history_ok = sandbox.history_strip  # verified by the backend when it built the copy
            root_url = f"http://127.0.0.1:{sandbox.proxy_port}"  # the sandbox's bridge to the model face
            endpoint = session_endpoint(root_url, sid, token, proxy_cfg.served_model_name)
            prepared = harness.prepare(sandbox, endpoint)
        except LegoError as exc:
            return DriveOutcome.failed("prepare", _describe(exc))
        limits = HarnessLimits(max_turns=opts.max_turns, timeout_s=opts.timeout_s)
        try:
            result = harness.run(task, sandbox, prepared, limits)
        except Exception as exc:  # the sandbox broke under the harness: who broke it is decided later
            return DriveOutcome.failed("harness", _describe(exc), history_ok)
        try:
            sandbox.kill_agent_processes()  # nothing the agent left running may write after this point
            diff = sandbox.diff()
        except Exception as exc:  # what the agent left in the sandbox breaks the diff: attributed later
            return DriveOutcome.failed("diff", _describe(exc), history_ok, result)
        error = result.logs[-LOG_CHARS:] if result.reason == "harness_error" else ""
        return DriveOutcome(result, diff, history_ok, error)
    finally:
        sandbox.close()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


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
        cause_detail=f"the rollout crashed outside the sandbox: {_describe(exc)}"[:300],
        metadata={"error": "".join(traceback.format_exception(exc))[-4000:]},
    )


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:48]


def _safe_version(harness: Harness) -> str:
    try:
        return harness.version()
    except LegoError:
        return "unknown"


ORACLE_MAX_TOKENS = 8192
"""lego-agent's completion budget when the oracle plays: it writes a whole gold patch in one tool call
(533 tokens on builtin roman-0001), which the budget that bounds a policy's runaway samples would cut."""


def oracle_config(cfg: LegoConfig) -> LegoConfig:
    """``cfg`` with room for the oracle's completions (lego-agent's budget raised to
    :data:`ORACLE_MAX_TOKENS` unless it is larger already)."""
    from lego.config import validate_config

    data = cfg.model_dump()
    options = data["harness"]["options"].setdefault("lego-agent", {})
    options["max_tokens"] = max(int(options.get("max_tokens") or 0), ORACLE_MAX_TOKENS)
    return validate_config(data)


def eval_sample_fn(spec: Any, tasks: Mapping[str, Task], out_dir: Path, cfg: LegoConfig) -> Callable[[Any], Any]:
    """The production ``run_sample`` of ``lego eval`` (an :class:`lego.eval.runner.SampleFnFactory`).

    One :class:`Policy` per policy of the spec, started on first use and shared by its samples, with
    ``cfg``'s engine, proxy, sandbox, harness and guard settings (the policy's model and the spec's
    engine kind replace ``cfg.engine``'s); every sample runs with the sampling override at
    ``spec.temperature`` and seed ``key.seed``, and its full trajectory is saved next to the sample file.
    """
    from lego.eval.results import SampleResult
    from lego.io import atomic_write_text

    policies: dict[str, RolloutRunner] = {}
    engine_kind = spec.engine

    def runner_for(name: str) -> RolloutRunner:
        if name not in policies:
            model = spec.policy(name).model
            kind = "oracle" if model == "oracle" else engine_kind
            ecfg = cfg.engine.model_copy(update={"kind": kind, "model": "default" if model == "oracle" else model})
            run_cfg = oracle_config(cfg) if kind == "oracle" else cfg
            policies[name] = RolloutRunner(run_cfg, Policy.start(ecfg, cfg.proxy, name=name))
        return policies[name]

    import threading

    lock = threading.Lock()

    def run_sample(key: Any) -> Any:
        with lock:
            runner = runner_for(key.policy)
        opts = RolloutOptions(
            override_sampling=True,
            temperature=spec.temperature,
            seed=key.seed,
            max_turns=spec.max_turns,
            timeout_s=spec.timeout_s,
        )
        traj = runner.run(tasks[key.task_id], key.harness, opts)
        path = (
            out_dir
            / "trajectories"
            / _slug(key.policy)
            / _slug(key.harness)
            / f"{_slug(key.task_id)}-{key.sample}.json"
        )
        atomic_write_text(path, traj.model_dump_json())
        return SampleResult.from_trajectory(key, traj, trajectory_path=str(path))

    return run_sample
