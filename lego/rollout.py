"""One rollout end to end, and many at once.

A rollout = a fresh sandbox of the task + a proxy session + the harness's own process pointed at
that session → the agent's diff graded against the hidden tests in another fresh sandbox →
guards → a :class:`~lego.types.Trajectory` holding the token-exact segments the proxy recorded.

    policy = Policy.start(cfg.engine, cfg.proxy, run_dir)      # engine + chat format + proxy server
    runner = RolloutRunner(cfg, policy)
    traj = runner.run(task, "lego-agent", RolloutOptions(training=True, temperature=1.0, seed=7))

Failures are labelled, never raised: a sandbox that cannot be created is ``env_error``; a harness
that crashes is ``harness_error``; both are infrastructure failures (masked out of the loss by the
trainer, reported separately by eval). Grading runs for every other label (a ``timeout`` or
``max_turns`` rollout still gets the reward its diff earns).
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

from harnesses.base import get_harness
from lego.config import EngineConfig, LegoConfig, ProxyConfig
from lego.engines import build_engine
from lego.engines.base import Engine
from lego.errors import LegoError
from lego.models.chat import ChatFormat
from lego.seams import Harness
from lego.types import (
    Endpoint,
    GradeResult,
    HarnessLimits,
    HarnessResult,
    Task,
    TerminationLabel,
    Trajectory,
)
from proxies.server import ProxyServer
from sandboxes.factory import create_sandbox
from sandboxes.grading import grade
from sandboxes.guards import agent_texts, guard_flags, verify_history_strip

__all__ = [
    "DriveOutcome",
    "Policy",
    "RolloutOptions",
    "RolloutRunner",
    "crashed_trajectory",
    "drive_and_grade",
    "eval_sample_fn",
    "final_label",
]

log = logging.getLogger("lego.rollout")

_LABEL_PRIORITY = ("overlong", "max_turns")
"""Labels the proxy decides (the policy ran out of context or turns) win over how the harness exited."""


@dataclass
class Policy:
    """A served policy: its engine, its chat format and the recording proxy in front of it.

    The proxy listens on a Unix socket in a private temp dir (sandboxes bind it; nothing else can
    reach it) and, when ``tcp`` is set, also on a loopback TCP port for harnesses run unsandboxed.
    """

    name: str
    engine: Engine
    chat: ChatFormat
    proxy: ProxyServer
    model_path: Path | None
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, engine_cfg: EngineConfig, proxy_cfg: ProxyConfig, name: str = "policy") -> Policy:
        """Build the engine named by ``engine_cfg`` (oracle: scored by the model it names) and start a proxy."""
        from lego.models.tiny import resolve_model  # torch: imported here, so Ray workers (drive only) stay light

        model_path = resolve_model(engine_cfg.model)
        chat = ChatFormat.from_pretrained(model_path)
        if engine_cfg.kind == "oracle":
            from lego.engines.oracle import OracleEngine
            from lego.engines.transformers_engine import TransformersEngine

            scorer = TransformersEngine.from_config(engine_cfg.model_copy(update={"kind": "transformers"}))
            engine: Engine = OracleEngine(chat, scorer)
        else:
            engine = build_engine(engine_cfg)
        tmp = tempfile.TemporaryDirectory(prefix="lego-proxy-")
        cfg = proxy_cfg.model_copy(update={"uds": str(Path(tmp.name) / "proxy.sock")})
        proxy = ProxyServer(engine, chat, cfg)
        proxy.start()
        return cls(name=name, engine=engine, chat=chat, proxy=proxy, model_path=model_path, _tmp=tmp)

    @property
    def uds(self) -> Path:
        assert self.proxy.uds is not None
        return Path(self.proxy.uds)

    def close(self) -> None:
        self.proxy.stop()
        close = getattr(self.engine, "close", None)
        if close is not None:
            asyncio.run(close())
        if self._tmp is not None:
            self._tmp.cleanup()


@dataclass(frozen=True)
class RolloutOptions:
    """How one rollout samples and when it must stop.

    ``training``: the proxy overrides sampling to ``temperature`` with no top-p/top-k truncation
    (as training needs, and as eval uses so every harness samples alike). ``seed`` makes the
    session's sampling reproducible."""

    training: bool = True
    temperature: float = 1.0
    seed: int = 0
    max_turns: int = 30
    timeout_s: float = 600.0


class RolloutRunner:
    """Runs rollouts of one policy; thread-safe (each rollout has its own session and sandbox)."""

    def __init__(self, cfg: LegoConfig, policy: Policy) -> None:
        self.cfg = cfg
        self.policy = policy
        self._harnesses: dict[str, Harness] = {}

    def harness(self, name: str) -> Harness:
        """The adapter for ``name``, built with its ``harness.options[name]`` settings."""
        if name not in self._harnesses:
            self._harnesses[name] = get_harness(name, **self.cfg.harness.options.get(name, {}))
        return self._harnesses[name]

    def run(self, task: Task, harness_name: str, opts: RolloutOptions) -> Trajectory:
        """One rollout of ``task`` in ``harness_name``; never raises for rollout failures (see module doc)."""
        t0 = time.monotonic()
        sid = self.open_session(task, harness_name, opts)
        proxy = self.policy.proxy
        try:

            def worth_grading(result: HarnessResult) -> bool:
                # grade unless the rollout ends as an infrastructure failure (the proxy's labels win)
                seen = proxy.trajectory(sid)
                seen.termination = final_label(seen.termination, result.reason)
                return not seen.is_infra_failure

            outcome = drive_and_grade(
                self.cfg,
                task,
                self.harness(harness_name),
                sid,
                opts,
                proxy_uds=self.policy.uds,
                proxy_cfg=proxy.config,
                grade_if=worth_grading,
            )
            return self.finish(sid, harness_name, outcome, t0)
        finally:
            proxy.close_session(sid)

    def open_session(self, task: Task, harness_name: str, opts: RolloutOptions) -> str:
        """Open the proxy session one rollout records into; returns its id (the caller closes it)."""
        sid = f"{_slug(task.instance_id)}-{uuid.uuid4().hex[:10]}"
        self.policy.proxy.open_session(
            sid,
            metadata={
                "task_id": task.instance_id,
                "harness": harness_name,
                "gold_patch": task.patch,
                "seed": opts.seed,
            },
            training=opts.training,
            temperature=opts.temperature,
            max_turns=opts.max_turns,
        )
        return sid

    def finish(self, sid: str, harness_name: str, outcome: DriveOutcome, t0: float) -> Trajectory:
        """The session's trajectory with the outcome of its drive filled in: label, grade, guards, timings.

        Runs where the proxy lives, whichever backend drove the harness (threads here, Ray workers)."""
        traj = self.policy.proxy.trajectory(sid)
        result = outcome.result
        traj.harness, traj.policy = harness_name, self.policy.name
        traj.harness_version = outcome.harness_version
        traj.termination = final_label(traj.termination, result.reason)
        if outcome.error:
            traj.metadata["error"] = outcome.error
        traj.metadata["harness_log_tail"] = result.logs[-4000:]
        traj.counters["turns"] = float(result.turns or traj.counters.get("calls", 0.0))
        if outcome.grade is not None and not traj.is_infra_failure:
            traj.grade = outcome.grade
            traj.reward = outcome.grade.reward
            excluded = outcome.grade.excluded_files
        else:
            excluded = []
        traj.guard_flags = guard_flags(
            history_strip=outcome.history_ok,
            egress_blocked=not self.cfg.sandbox.unsafe_no_isolation,
            excluded_files=excluded,
            texts=agent_texts(traj.messages),
        )
        traj.timings.update({"harness_s": result.wall_s, "grade_s": outcome.grade_s, "wall_s": time.monotonic() - t0})
        return traj

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

    ``diff`` is None when no diff was taken (no sandbox, the harness raised); ``grade`` is None when
    the diff was not graded; ``error`` is the text recorded as ``metadata["error"]``."""

    result: HarnessResult
    diff: str | None
    history_ok: bool
    error: str
    grade: GradeResult | None = None
    grade_s: float = 0.0
    harness_version: str = "unknown"


def final_label(proxy_label: TerminationLabel, harness_reason: TerminationLabel) -> TerminationLabel:
    """The rollout's termination: the proxy's ``overlong``/``max_turns`` win over how the harness exited."""
    return proxy_label if proxy_label in _LABEL_PRIORITY else harness_reason


def drive_and_grade(
    cfg: LegoConfig,
    task: Task,
    harness: Harness,
    sid: str,
    opts: RolloutOptions,
    *,
    proxy_uds: Path,
    proxy_cfg: ProxyConfig,
    grade_if: Callable[[HarnessResult], bool] | None = None,
) -> DriveOutcome:
    """Sandbox → prepare → run → diff → grade, for the proxy session ``sid`` reached at ``proxy_uds``.

    The half of a rollout that needs a sandbox; both backends run it (the threads backend in-process,
    the Ray backend on a worker, with ``proxy_uds`` a local forwarder to the driver's proxy). The diff
    is graded when there is one and ``grade_if(result)`` holds (default: always). ``proxy_cfg`` is the
    serving proxy's config (model name, API key for the harness's endpoint)."""
    result, diff, history_ok, error = _drive(cfg, task, harness, sid, opts, proxy_uds, proxy_cfg)
    outcome = DriveOutcome(result, diff, history_ok, error, harness_version=_safe_version(harness))
    if diff is not None and (grade_if is None or grade_if(result)):
        t_grade = time.monotonic()
        outcome.grade = grade(task, diff, cfg=cfg.sandbox)
        outcome.grade_s = time.monotonic() - t_grade
    return outcome


def _drive(
    cfg: LegoConfig,
    task: Task,
    harness: Harness,
    sid: str,
    opts: RolloutOptions,
    proxy_uds: Path,
    proxy_cfg: ProxyConfig,
) -> tuple[HarnessResult, str | None, bool, str]:
    """Sandbox → prepare → run → diff. Returns (result, diff or None, history stripped?, error text)."""
    ro_binds = list(getattr(harness, "ro_binds", lambda: [])())
    try:
        sandbox = create_sandbox(cfg.sandbox, task, proxy_uds=proxy_uds, ro_binds=ro_binds)
    except LegoError as exc:
        return HarnessResult(exit_code=None, reason="env_error", logs=str(exc)), None, False, str(exc)
    try:
        held = getattr(sandbox, "history_strip", None)  # backends verify it when they build the copy
        history_ok = bool(held) if held is not None else verify_history_strip(sandbox.root)
        root = f"http://127.0.0.1:{sandbox.proxy_port}/s/{sid}"
        endpoint = Endpoint(
            base_url=f"{root}/v1",
            anthropic_base_url=root,
            api_key=proxy_cfg.api_key or "lego-local",
            model=proxy_cfg.served_model_name,
            session_id=sid,
        )
        try:
            harness.prepare(sandbox, endpoint)
            result = harness.run(
                task, sandbox, endpoint, HarnessLimits(max_turns=opts.max_turns, timeout_s=opts.timeout_s)
            )
        except LegoError as exc:
            result = HarnessResult(exit_code=None, reason="harness_error", logs=str(exc))
            return result, None, history_ok, f"{type(exc).__name__}: {exc}"
        diff = sandbox.diff()
        return result, diff, history_ok, result.logs[-2000:] if result.reason in ("harness_error",) else ""
    except LegoError as exc:
        return HarnessResult(exit_code=None, reason="env_error", logs=str(exc)), None, False, str(exc)
    finally:
        sandbox.close()


def crashed_trajectory(task: Task, harness: str, policy: str, exc: BaseException) -> Trajectory:
    """The ``env_error`` record of a rollout that crashed below the runner (a bug, a lost worker)."""
    return Trajectory(
        trajectory_id=uuid.uuid4().hex,
        session_id="",
        task_id=task.instance_id,
        harness=harness,
        policy=policy,
        termination="env_error",
        metadata={"error": "".join(traceback.format_exception(exc))[-4000:]},
    )


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:48]


def _safe_version(harness: Harness) -> str:
    try:
        return harness.version()
    except LegoError:
        return "unknown"


def eval_sample_fn(spec: Any, tasks: Mapping[str, Task], out_dir: Path) -> Callable[[Any], Any]:
    """The production ``run_sample`` of ``lego eval`` (an :class:`eval.runner.SampleFnFactory`).

    One :class:`Policy` per policy of the spec, started on first use and shared by its samples;
    every sample runs with the sampling override at ``spec.temperature`` and seed ``key.seed``, and
    its full trajectory is saved next to the sample file.
    """
    from eval.results import SampleResult
    from lego.config import load_config
    from lego.io import atomic_write_text

    cfg = load_config(None, [])
    policies: dict[str, RolloutRunner] = {}
    engine_kind = getattr(spec, "engine", "transformers")

    def runner_for(name: str) -> RolloutRunner:
        if name not in policies:
            model = spec.policy(name).model
            kind = "oracle" if model == "oracle" else engine_kind
            ecfg = cfg.engine.model_copy(update={"kind": kind, "model": "default" if model == "oracle" else model})
            policies[name] = RolloutRunner(cfg, Policy.start(ecfg, cfg.proxy, name=name))
        return policies[name]

    import threading

    lock = threading.Lock()

    def run_sample(key: Any) -> Any:
        with lock:
            runner = runner_for(key.policy)
        opts = RolloutOptions(
            training=True,
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
