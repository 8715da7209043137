"""Grading with hidden tests: the reward nobody can edit.

``grade(task, diff)`` creates a *fresh* sandbox from the task's pristine repo (never the agent's
sandbox), applies the agent's diff minus test files and test infrastructure (:func:`filter_diff`;
what was dropped is kept in ``GradeResult.excluded_files``), applies the hidden ``test_patch``, and
runs exactly the FAIL_TO_PASS + PASS_TO_PASS node ids with ``-p no:cacheprovider`` and
``PYTHONDONTWRITEBYTECODE=1``. Results come from a small pytest plugin written, with its JSON
report, to a fresh directory in the grading sandbox's private /tmp, outside the repo and unknown to
the agent's sandbox. A test absent from the report is ``missing`` (a failure); the reward is 1 iff
every named test ``passed`` and pytest exited 0. Nothing depends on time or randomness besides the
tests themselves, so the same diff grades the same twice.

Limits: the code under test runs in the same sandbox as the reporter, so a patch that monkeypatches
pytest at import time could in principle forge results; such patches show up as
``forge_test_output`` hack signatures and in the excluded files. Only pytest-based ``test_cmd``s
are supported (the built-in suite and SWE-bench-style Python tasks).
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import time
import uuid

from lego.config import SandboxConfig
from lego.errors import GradingError
from lego.seams import Sandbox
from lego.types import GradeResult, Task
from sandboxes.factory import create_sandbox
from sandboxes.guards import filter_diff, patch_paths

__all__ = ["REPORT_PLUGIN", "grade", "grade_in"]

REPORT_PLUGIN = '''"""lego's grading reporter: writes {nodeid: outcome} to $LEGO_GRADE_REPORT at session end."""
import json, os

_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_results = {}
_collect_errors = []


def _put(nodeid, outcome):
    if nodeid not in _results or _RANK[outcome] >= _RANK[_results[nodeid]]:
        _results[nodeid] = outcome


def pytest_runtest_logreport(report):
    if report.when == "call":
        _put(report.nodeid, "skipped" if report.skipped else report.outcome)
    elif report.failed:
        _put(report.nodeid, "error")
    elif report.skipped:
        _put(report.nodeid, "skipped")


def pytest_collectreport(report):
    if report.failed:
        _collect_errors.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["LEGO_GRADE_REPORT"], "w") as f:
        json.dump({"tests": _results, "collect_errors": _collect_errors, "exitstatus": int(exitstatus)}, f)
'''


_AGENT_PATCH_FAILED, _TEST_PATCH_FAILED = 90, 91
_SCRIPT = """set -u
W=$1; shift
mkdir -p "$W" && tar -xf "$W.tar" -C "$W" || exit 92
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
if [ -s "$W/agent.patch" ]; then git apply --whitespace=nowarn --binary "$W/agent.patch" || exit 90; fi
if [ -s "$W/test.patch" ]; then git apply --whitespace=nowarn --binary "$W/test.patch" || exit 91; fi
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$W" LEGO_GRADE_REPORT="$W/report.json" exec "$@"
"""


def _bundle(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def grade_in(sb: Sandbox, task: Task, diff: str, *, timeout: float | None = None) -> GradeResult:
    """Grade ``diff`` inside ``sb``, which must be a fresh sandbox of ``task``'s pristine repo.

    Three sandbox calls: write one tar (both patches and the reporter), one exec (unpack, apply the
    agent's diff, apply the hidden tests, run pytest), read the report.
    """
    t0 = time.monotonic()
    if "pytest" not in task.test_cmd:
        raise GradingError(
            f"task {task.instance_id}: test_cmd {task.test_cmd!r} is not pytest-based; lego grades pytest tasks only"
        )
    names = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    if not names:
        raise GradingError(f"task {task.instance_id} names no FAIL_TO_PASS/PASS_TO_PASS tests; rebuild the task")
    kept, excluded = filter_diff(diff, protected=patch_paths(task.test_patch))
    work = f"/tmp/lego-grade-{uuid.uuid4().hex}"
    log: list[str] = []
    if excluded:
        log.append("excluded from the graded diff: " + ", ".join(excluded))
    sb.write(
        f"{work}.tar",
        _bundle({"agent.patch": kept, "test.patch": task.test_patch, "lego_grade_report.py": REPORT_PLUGIN}),
    )
    tests = [*shlex.split(task.test_cmd), "-p", "no:cacheprovider", "-p", "lego_grade_report", "-q", *names]
    run = sb.exec(["/bin/sh", "-c", _SCRIPT, "grade", work, *tests], timeout=timeout)
    output = (run.stdout + run.stderr)[-4000:]
    if run.exit_code == _TEST_PATCH_FAILED:
        raise GradingError(
            f"task {task.instance_id}: the hidden test_patch does not apply ({output.strip()}); rebuild the task"
        )
    applied = run.exit_code != _AGENT_PATCH_FAILED
    results = {n: "missing" for n in names}
    exit_status: int | None = None
    if not applied:
        log.append(f"the agent's diff does not apply: {output.strip()}")
    else:
        log.append(f"$ {shlex.join(tests)}\n[exit {run.exit_code}{' timeout' if run.timed_out else ''}]\n{output}")
        try:
            report = json.loads(sb.read(f"{work}/report.json"))
            got = report.get("tests", {})
            exit_status = int(report.get("exitstatus", -1))
            for n in names:
                if n in got:
                    results[n] = str(got[n])
        except Exception as exc:  # no report: pytest crashed or was killed; every test stays missing
            log.append(f"no test report: {exc}")
        if run.exit_code != 0 and exit_status == 0:
            exit_status = run.exit_code  # the process died after the report: not a clean pass
    resolved = applied and exit_status == 0 and all(v == "passed" for v in results.values())
    return GradeResult(
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        tests=results,
        excluded_files=excluded,
        log="\n".join(log)[-20000:],
        duration_s=time.monotonic() - t0,
    )


def grade(task: Task, diff: str, *, cfg: SandboxConfig | None = None, timeout: float | None = None) -> GradeResult:
    """Grade ``diff`` against ``task``'s hidden tests in a fresh sandbox (see module doc).

    ``cfg`` picks the backend and limits (default: a local sandbox with default limits);
    ``timeout`` bounds the test run (default: ``cfg.command_timeout_s``).
    """
    cfg = cfg or SandboxConfig()
    t0 = time.monotonic()
    sb = create_sandbox(cfg, task)
    try:
        result = grade_in(sb, task, diff, timeout=timeout)
    finally:
        sb.close()
    return result.model_copy(update={"duration_s": time.monotonic() - t0})
