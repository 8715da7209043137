"""One rollout's drive, where its sandbox runs: sandbox → prepare → run → kill → diff → grade.

Both rollout backends run :func:`drive_and_grade` (the threads backend in-process, the Ray backend on a
worker) and hand its picklable :class:`DriveOutcome` to :meth:`lego.conductor.rollout.RolloutRunner.finish`,
which runs where the proxy lives. Nothing here raises for what the agent's commands did: every failure
is recorded with the stage it stopped at, and :func:`lego.conductor.verdict.attribute` decides later
who caused it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from lego.conductor.verdict import DriveStage
from lego.config import LegoConfig, ProxyConfig
from lego.errors import GradingError, LegoError
from lego.proxies.server import session_endpoint
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.grading import grade
from lego.seams import Harness
from lego.types import GradeResult, HarnessLimits, HarnessResult, Task, TerminationLabel

__all__ = ["LOG_CHARS", "DriveJob", "DriveOutcome", "RolloutOptions", "describe_error", "drive_and_grade"]

LOG_CHARS = 2000


@dataclass(frozen=True)
class RolloutOptions:
    """How one rollout samples and when it must stop.

    ``override_sampling``: the proxy samples at ``temperature`` with no top-p/top-k truncation, whatever
    the harness asks (as training needs, and as eval uses so every harness samples alike); False lets
    the harness choose. ``seed`` seeds every generation of the session with its index
    (:func:`lego.proxies.sampling.generation_seed`), so the rollout's tokens do not depend on what else
    the engine serves."""

    override_sampling: bool = True
    temperature: float = 1.0
    seed: int = 0
    max_turns: int = 30
    timeout_s: float = 600.0


@dataclass(frozen=True)
class DriveJob:
    """One rollout's drive as a record that crosses every hop unchanged (the runner, a Ray task, the
    worker): the run's config, the task, the harness by name, the proxy session and its model-face
    token, the rollout's options and the serving proxy's config. Picklable; what is local to where it
    runs (the harness adapter, the socket the sandbox binds) is passed beside it."""

    cfg: LegoConfig
    task: Task
    harness_name: str
    session_id: str
    token: str
    opts: RolloutOptions
    proxy_cfg: ProxyConfig


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


def drive_and_grade(job: DriveJob, harness: Harness, *, proxy_uds: Path) -> DriveOutcome:
    """Sandbox → prepare → run → kill the agent's processes → diff → grade, for ``job``'s proxy session
    reached at ``proxy_uds`` (the model face, or a forwarder to it) with ``harness`` (``job.harness_name``'s
    adapter).

    The half of a rollout that needs a sandbox; both backends run it (the threads backend in-process,
    the Ray backend on a worker, with ``proxy_uds`` a local forwarder to the driver's proxy). Every diff
    that was taken is graded: whether the grade counts is decided where the proxy lives
    (:meth:`lego.conductor.rollout.RolloutRunner.finish`). Grading that raises is tried once more, then the
    pristine repo is graded too, for the report: either way a failure of lego's grading path is
    infrastructure, never the policy's zero (:func:`lego.conductor.verdict.attribute`)."""
    cfg, task = job.cfg, job.task
    outcome = _drive(job, harness, proxy_uds)
    outcome.harness_version = _safe_version(harness)
    if outcome.diff is not None:
        t_grade = time.monotonic()
        try:
            outcome.grade = _grade_twice(task, outcome.diff, cfg)
        except Exception as exc:  # lego's own grading path failed twice: attributed (infrastructure), not raised
            outcome.stage, outcome.error = "grade", describe_error(exc)
            outcome.pristine_grades = _pristine_grades(task, cfg)
        outcome.grade_s = time.monotonic() - t_grade
    return outcome


def _grade_twice(task: Task, diff: str, cfg: LegoConfig) -> GradeResult:
    """``grade(task, diff)``, once more if it raises. Whatever the agent's code does under the tests
    comes back as a :class:`GradeResult`; an exception is lego's own path failing (a sandbox that did
    not start, a loaded daemon, a bug), so it gets a second chance before the rollout is masked."""
    try:
        return grade(task, diff, cfg=cfg.sandbox)
    except GradingError:
        raise  # the task cannot be graded: trying again changes nothing
    except Exception:
        return grade(task, diff, cfg=cfg.sandbox)


def _pristine_grades(task: Task, cfg: LegoConfig) -> bool:
    """Whether ``task``'s pristine repo (an empty diff) grades without error."""
    try:
        grade(task, "", cfg=cfg.sandbox)
    except Exception:  # the answer is the point: any failure means the task or the grader is broken
        return False
    return True


def _drive(job: DriveJob, harness: Harness, proxy_uds: Path) -> DriveOutcome:
    """Sandbox → prepare → run → kill → diff; each failure is recorded with its stage, never raised.

    From the harness's launch on, the agent's commands can break anything in the sandbox, so every
    exception there is caught and attributed later (:func:`lego.conductor.verdict.attribute`)."""
    cfg, task, opts, proxy_cfg = job.cfg, job.task, job.opts, job.proxy_cfg
    sid, token = job.session_id, job.token
    ro_binds = harness.ro_binds()
    # Bun-built harnesses reserve GBs of address space at start and die at random under less
    memory_mb = max(cfg.sandbox.memory_mb, harness.min_memory_mb)
    sandbox_cfg = cfg.sandbox.model_copy(update={"memory_mb": memory_mb})
    try:
        sandbox = create_sandbox(sandbox_cfg, task, proxy_uds=proxy_uds, ro_binds=ro_binds)
    except LegoError as exc:
        return DriveOutcome.failed("sandbox", describe_error(exc))
    try:
        try:
            history_ok = sandbox.history_strip  # verified by the backend when it built the copy
            root_url = f"http://127.0.0.1:{sandbox.proxy_port}"  # the sandbox's bridge to the model face
            endpoint = session_endpoint(root_url, sid, token, proxy_cfg.served_model_name)
            prepared = harness.prepare(sandbox, endpoint)
        except LegoError as exc:
            return DriveOutcome.failed("prepare", describe_error(exc))
        limits = HarnessLimits(max_turns=opts.max_turns, timeout_s=opts.timeout_s)
        try:
            result = harness.run(task, sandbox, prepared, limits)
        except Exception as exc:  # the sandbox broke under the harness: who broke it is decided later
            return DriveOutcome.failed("harness", describe_error(exc), history_ok)
        try:
            sandbox.kill_agent_processes()  # nothing the agent left running may write after this point
            diff = sandbox.diff()
        except Exception as exc:  # what the agent left in the sandbox breaks the diff: attributed later
            return DriveOutcome.failed("diff", describe_error(exc), history_ok, result)
        error = result.logs[-LOG_CHARS:] if result.reason == "harness_error" else ""
        return DriveOutcome(result, diff, history_ok, error)
    finally:
        sandbox.close()


def describe_error(exc: BaseException) -> str:
    """``exc`` as one line for logs and ``metadata["error"]``: its type and message."""
    return f"{type(exc).__name__}: {exc}"


def _safe_version(harness: Harness) -> str:
    try:
        return harness.version()
    except LegoError:
        return "unknown"
