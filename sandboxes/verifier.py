"""Grading a Harbor task with its own verifier (``tests/test.sh``), in a fresh container.

``grade_verifier(task, diff)`` creates a fresh docker sandbox of the task's image (never the agent's
container) and in it:

1. keeps the part of the agent's diff the allow-list accepts (:func:`lego.sandboxes.guards.filter_diff`,
   as for every task: never tests, startup configuration, symlinks or binaries) and applies it to
   the pristine working directory; a diff that does not apply is the policy's 0;
2. only then copies the task's ``tests/`` into ``/tests`` (they were never in any container the
   agent ran in) and runs ``bash /tests/test.sh`` from the working directory, with ``[verifier] env``
   and ``[verifier] timeout_sec``, as the sandbox's unprivileged uid, without network;
3. kills whatever the run left behind and reads ``/logs/verifier/reward.txt`` (one number), else
   ``reward.json`` (``{"reward": x, ...}`` or a single entry), else ``rewards.json``; ``resolved``
   is ``reward >= 1``.

A verifier that writes no reward is broken only if it writes none on the pristine repo either: then
(and when ``tests/test.sh`` is missing) it is a :class:`~lego.errors.GradingError`, infrastructure,
never the policy's 0; when the pristine repo does get a reward, the agent's diff broke the run and
scores 0. ``grade_verifier(task, task.patch)`` with the task's script answer (``solution/``) first
plays it in a fresh sandbox and grades the diff it leaves (:func:`solution_diff`), so the gold check
goes through the same filter and verifier as any attempt.

What this trusts, and why it is weaker than :mod:`lego.sandboxes.grading`: the verifier is the
task's own script, and it runs in the same container, as the same uid, in the same process tree as
the code under test (the Harbor format defines no other place for it). The agent's code therefore
runs while the verifier does and can forge the result: write ``/logs/verifier/reward.txt`` itself,
rewrite ``/tests`` before test.sh reads them, or make the tests' process exit 0. The Harbor format
itself defends against none of that; lego adds only what lies outside the test run: the tests are
absent from the agent's episode, the graded diff is filtered, nothing the agent left running
survives into grading (a fresh container), and processes the run left behind are killed before the
reward is read. Train on Harbor tasks whose verifier you trust to that extent, or convert them to
pytest tasks (FAIL_TO_PASS/PASS_TO_PASS) that :func:`lego.sandboxes.grading.grade` judges.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
import time
from pathlib import Path

from lego.config import SandboxConfig
from lego.engines.script_answer import ScriptAnswer
from lego.errors import GradingError, SandboxError
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.guards import filter_diff, tracked_files
from lego.seams import Sandbox
from lego.types import GradeResult, Task

__all__ = ["REWARD_FILES", "grade_verifier", "is_harbor", "solution_diff"]

REWARD_FILES = ("reward.txt", "reward.json", "rewards.json")
"""Where a verifier writes its reward, under /logs/verifier, in the order they are read."""

_LOGS = "/logs/verifier"
_PATCH = "/tmp/lego-graded.patch"
_TESTS_TAR = "/tmp/lego-tests.tar"


def is_harbor(task: Task) -> bool:
    """Whether ``task`` is graded by its own Harbor verifier (it came from a Harbor task directory)."""
    return isinstance(task.metadata.get("harbor"), dict) and "task_dir" in task.metadata["harbor"]


def _cfg(task: Task, cfg: SandboxConfig | None) -> SandboxConfig:
    cfg = cfg or SandboxConfig(kind="docker")
    if cfg.kind != "docker":
        raise GradingError(
            f"task {task.instance_id} is a Harbor task: it runs in its own image, so it needs sandbox.kind=docker "
            f"(got {cfg.kind!r})"
        )
    return cfg


def _tests_dir(task: Task) -> Path:
    tests = Path(task.metadata["harbor"]["task_dir"]) / "tests"
    if not (tests / "test.sh").is_file():
        raise GradingError(f"Harbor task {task.instance_id}: {tests}/test.sh is missing, so it cannot be graded")
    return tests


def _tests_tar(tests: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(tests.rglob("*")):
            if p.is_file() and not p.is_symlink():
                info = tarfile.TarInfo(p.relative_to(tests).as_posix())
                data = p.read_bytes()
                info.size, info.mode = len(data), p.stat().st_mode & 0o755
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _parse_reward(name: str, text: str) -> float:
    """The reward a file holds; ValueError naming what is wrong."""
    if name == "reward.txt":
        value = float(text.strip())
    else:
        data = json.loads(text)
        if not isinstance(data, dict) or not data:
            raise ValueError("expected a JSON object of rewards")
        if "reward" in data:
            value = data["reward"]
        elif len(data) == 1:
            value = next(iter(data.values()))
        else:
            raise ValueError(f"several rewards ({', '.join(sorted(data))}) and none named 'reward'; lego trains on one")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"the reward is {value!r}, not a number")
    if not math.isfinite(float(value)):
        raise ValueError(f"the reward is {value}")
    return float(value)


def _read_reward(sb: Sandbox) -> tuple[float | None, str]:
    """(reward, where it came from) or (None, why there is none)."""
    for name in REWARD_FILES:
        try:
            text = sb.read(f"{_LOGS}/{name}").decode(errors="replace")
        except SandboxError:
            continue
        try:
            return _parse_reward(name, text), name
        except ValueError as exc:
            return None, f"{_LOGS}/{name} is unreadable ({exc}): {text[:200]!r}"
    return None, f"the verifier wrote none of {', '.join(REWARD_FILES)} in {_LOGS}"


def _run(task: Task, diff: str, cfg: SandboxConfig, timeout: float) -> tuple[float | None, list[str], list[str]]:
    """One verifier run in a fresh sandbox: (reward or None, log lines, excluded files)."""
    tests = _tests_dir(task)
    harbor = task.metadata["harbor"]
    sb = create_sandbox(cfg, task)
    try:
        kept, excluded = filter_diff(diff, tracked_files(sb))
        log = [f"excluded from the graded diff: {', '.join(excluded)}"] if excluded else []
        if kept.strip():
            sb.write(_PATCH, kept.encode())
            applied = sb.exec(["git", "apply", "--whitespace=nowarn", _PATCH], timeout=120)
            if applied.exit_code != 0:
                return 0.0, [*log, f"reward 0: the agent's diff does not apply: {applied.stderr.strip()}"], excluded
        sb.write(_TESTS_TAR, _tests_tar(tests))
        unpacked = sb.exec(f"tar -xf {_TESTS_TAR} -C /tests && rm -f {_TESTS_TAR} && rm -rf {_LOGS}/*", timeout=120)
        if unpacked.exit_code != 0:
            raise GradingError(
                f"Harbor task {task.instance_id}: cannot put its tests in /tests ({unpacked.stderr.strip()}); "
                "is its image built from the task directory (lego's epilogue makes /tests)?"
            )
        env = {str(k): str(v) for k, v in (harbor.get("verifier_env") or {}).items()}
        run = sb.exec(["bash", "/tests/test.sh"], env=env, timeout=timeout)
        sb.kill_agent_processes()  # nothing the run left behind writes the reward after this
        log.append(f"$ bash /tests/test.sh\n[exit {run.exit_code}{', timed out' if run.timed_out else ''}]")
        log.append((run.stdout + run.stderr)[-8000:])
        reward, where = _read_reward(sb)
        log.append(f"reward {reward} from {_LOGS}/{where}" if reward is not None else f"no reward: {where}")
        return reward, log, excluded
    finally:
        sb.close()


def solution_diff(task: Task, cfg: SandboxConfig | None = None) -> str:
    """The diff the task's own solution (``solution/solve.sh``) leaves in a fresh sandbox. A solution
    that is missing or fails is the task's fault: :class:`GradingError`."""
    cfg = _cfg(task, cfg)
    script = ScriptAnswer.decode(task.patch)
    if script is None:
        raise GradingError(f"Harbor task {task.instance_id} has no solution/solve.sh to play")
    sb = create_sandbox(cfg, task)
    try:
        limit = float(task.metadata["harbor"].get("agent_timeout_sec") or cfg.command_timeout_s)
        run = sb.exec(script.command(), timeout=limit)
        sb.kill_agent_processes()
        if run.exit_code != 0:
            raise GradingError(
                f"Harbor task {task.instance_id}: solution/solve.sh failed [exit {run.exit_code}]: "
                f"{(run.stdout + run.stderr)[-2000:]}"
            )
        return sb.diff()
    finally:
        sb.close()


def grade_verifier(
    task: Task, diff: str, *, cfg: SandboxConfig | None = None, timeout: float | None = None
) -> GradeResult:
    """Grade ``diff`` with ``task``'s own verifier in a fresh container (see module doc). ``cfg`` must
    be a docker config (default: one with default limits); ``timeout`` bounds test.sh (default: the
    task's ``[verifier] timeout_sec``)."""
    t0 = time.monotonic()
    cfg = _cfg(task, cfg)
    if diff == task.patch and ScriptAnswer.decode(diff) is not None:
        diff = solution_diff(task, cfg)
    limit = timeout if timeout is not None else float(task.metadata["harbor"].get("verifier_timeout_sec") or 600.0)
    reward, log, excluded = _run(task, diff, cfg, limit)
    if reward is None:
        pristine, pristine_log, _ = _run(task, "", cfg, limit) if diff.strip() else (None, log, [])
        if pristine is None:
            raise GradingError(
                f"Harbor task {task.instance_id}: its verifier writes no reward on the pristine repo either, so the "
                "task cannot be graded; its log:\n" + "\n".join(pristine_log)[-4000:]
            )
        log.append(
            f"reward 0: the verifier wrote no reward with the agent's diff (on the pristine repo it wrote {pristine})"
        )
        reward = 0.0
    resolved = reward >= 1.0
    return GradeResult(
        reward=reward,
        resolved=resolved,
        tests={"tests/test.sh": "passed" if resolved else "failed"},
        excluded_files=excluded,
        log="\n".join(log)[-20000:],
        duration_s=time.monotonic() - t0,
    )
