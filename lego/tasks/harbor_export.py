"""lego tasks as Harbor task directories (``lego tasks export --format harbor``), the other way from
:mod:`lego.tasks.harbor`.

One directory per task, written from Harbor's published task format::

    <instance_id>/
    ├── task.toml               schema 1.1: [task] name "lego/<instance_id>", [metadata] (lego's record:
    │                           repo, base commit, split and the task's scalar metadata), timeouts
    ├── instruction.md          the problem statement
    ├── environment/Dockerfile  FROM --base-image, the pristine repo COPYed to /testbed (its committed
    │   └── repo/               tree, one fresh commit), pytest (or the task environment's requirements)
    ├── tests/test.sh           applies test.patch (the hidden tests), then lego_verify.py runs the tests
    │   ├── test.patch          tests.json names and writes /logs/verifier/reward.txt: 1 iff every one
    │   ├── tests.json          passed. Neither writes a reward when the hidden tests do not apply or
    │   └── lego_verify.py      pytest cannot run them: a broken task, never a failed attempt
    └── solution/solve.sh       applies fix.patch (the gold patch) in the working directory
        └── fix.patch

A task whose repo lives in an image (SWE-bench's ``/testbed``) is written ``FROM`` that image instead.
The verifier is the task's own tests, run the way Harbor runs any verifier (in the agent's container,
sharing its processes with the code under test): it is weaker than lego's grader, which a task keeps
when it is trained on from its lego source. Only pytest ``test_cmd`` s are exported.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from lego.errors import TaskError
from lego.tasks.materialize import git_env
from lego.types import Task

__all__ = ["DEFAULT_BASE_IMAGE", "export_task"]

DEFAULT_BASE_IMAGE = "python:3.11-bookworm"
"""Has git, which Harbor-in-lego needs, and pip for the tests' requirements."""

_TIMEOUT_SEC = 600.0
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

_TEST_SH = """#!/bin/bash
# The verifier of lego task {instance_id}, written by `lego tasks export --format harbor`: applies the
# hidden tests (test.patch) in the working directory, then lego_verify.py runs the tests tests.json names
# and writes /logs/verifier/reward.txt. No reward is written when the hidden tests do not apply or
# pytest cannot run them: the task is broken, which is not an attempt that failed.
set -u
mkdir -p /logs/verifier
if [ -s /tests/test.patch ]; then
  git apply --whitespace=nowarn /tests/test.patch || { echo "test.sh: the hidden tests do not apply" >&2; exit 1; }
fi
PY=$(command -v python3 || command -v python) || { echo "test.sh: the image has no python" >&2; exit 1; }
exec "$PY" /tests/lego_verify.py
"""

_VERIFY_PY = '''"""Runs the tests named in tests.json and writes /logs/verifier/reward.txt (written by lego).

As a script (from test.sh): pytest in a child process, with this file loaded as a plugin
(``-p lego_verify``) that records each test's setup, call and teardown outcomes; reward 1 when every
named test passed all three, else 0. When pytest cannot run the tests (exit status 2-5: interrupted,
internal error, usage error, nothing collected) no reward is written. Python >= 3.6, stdlib only.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LOGS = "/logs/verifier"
_STAGES = {}


def pytest_runtest_logreport(report):
    _STAGES.setdefault(report.nodeid, {})[report.when] = report.outcome


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("LEGO_VERIFY_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(_STAGES, f)


def _passed(stages):
    return all(stages.get(when) == "passed" for when in ("setup", "call", "teardown"))


def main():
    with open(os.path.join(HERE, "tests.json")) as f:
        spec = json.load(f)
    names = spec["tests"]
    report = os.path.join(LOGS, "lego-report.json")
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    paths = [HERE] + [os.path.abspath(r) for r in spec.get("import_roots") or []]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["LEGO_VERIFY_REPORT"] = report
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "lego_verify"]
    for plugin in spec.get("plugins") or []:
        argv += ["-p", plugin]
    code = subprocess.call(argv + list(spec.get("pytest_args") or []) + names, env=env)
    if code not in (0, 1) or not os.path.exists(report):
        sys.stderr.write("lego_verify: pytest could not run the tests (exit %d); no reward written\\n" % code)
        return 1
    with open(report) as f:
        stages = json.load(f)
    passed = [n for n in names if _passed(stages.get(n, {}))]
    print("lego_verify: %d/%d named tests passed" % (len(passed), len(names)))
    with open(os.path.join(LOGS, "reward.txt"), "w") as f:
        f.write("1\\n" if len(passed) == len(names) else "0\\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

_SOLVE_SH = """#!/bin/bash
# The gold patch of lego task {instance_id}, applied in the working directory (written by lego).
set -euo pipefail
git apply --whitespace=nowarn "$(dirname "${BASH_SOURCE[0]}")/fix.patch"
"""


def _toml(value: Any) -> str:
    """A TOML value (strings as basic strings: JSON's escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def _task_toml(task: Task) -> str:
    title = next((ln.strip() for ln in task.problem_statement.splitlines() if ln.strip()), "")[:200]
    meta: dict[str, Any] = {
        "lego_instance_id": task.instance_id,
        "repo": task.repo,
        "base_commit": task.base_commit,
        "split": task.split,
    }
    meta.update({k: v for k, v in task.metadata.items() if isinstance(v, str | int | float | bool) and k not in meta})
    lines = ['schema_version = "1.1"', "", "[task]", f"name = {_toml('lego/' + task.instance_id)}"]
    lines += [f"description = {_toml(title)}", "", "[metadata]"]
    lines += [f"{k if _BARE_KEY.fullmatch(k) else json.dumps(k)} = {_toml(v)}" for k, v in meta.items()]
    lines += ["", "[verifier]", f"timeout_sec = {_TIMEOUT_SEC}", "", "[agent]", f"timeout_sec = {_TIMEOUT_SEC}"]
    lines += ["", "[environment]", f"build_timeout_sec = {_TIMEOUT_SEC}", "allow_internet = false", ""]
    return "\n".join(lines)


def _pytest_spec(task: Task) -> dict[str, Any]:
    """``task.test_cmd`` (``[K=V ...] python -m pytest ARGS`` or ``pytest ARGS``) as tests.json's fields."""
    tokens = shlex.split(task.test_cmd)
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    if tokens and Path(tokens[0]).name in ("pytest", "py.test"):
        args = tokens[1:]
    elif len(tokens) >= 3 and "python" in Path(tokens[0]).name and tokens[1:3] == ["-m", "pytest"]:
        args = tokens[3:]
    else:
        raise TaskError(f"task {task.instance_id}: test_cmd {task.test_cmd!r} is not pytest; only pytest tasks export")
    environment = task.environment
    return {
        "tests": list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS])),
        "FAIL_TO_PASS": task.FAIL_TO_PASS,
        "PASS_TO_PASS": task.PASS_TO_PASS,
        "pytest_args": args,
        "env": env,
        "import_roots": environment.import_roots if environment else [],
        "plugins": environment.plugins if environment else [],
    }


def _dockerfile(task: Task, base_image: str) -> str:
    if task.repo_path:
        lines = [
            f"FROM {base_image}",
            "COPY repo/ /testbed/",
            "WORKDIR /testbed",
            "RUN git init -q && git add -A -f && git -c user.name=lego -c user.email=lego@localhost "
            f"commit -q -m {shlex.quote(task.instance_id + ' at its base commit')}",
        ]
        reqs = task.environment.requirements if task.environment else []
        local = [r for r in reqs if r.startswith((".", "/")) or r.endswith((".tar.gz", ".zip", ".whl"))]
        if local:
            raise TaskError(
                f"task {task.instance_id}: requirements {local} are local files, which an image cannot name"
            )
        if reqs:
            lines.append(f"RUN python3 -m pip install --no-cache-dir {' '.join(shlex.quote(r) for r in reqs)}")
        else:
            lines.append('RUN python3 -c "import pytest" 2>/dev/null || python3 -m pip install --no-cache-dir pytest')
        return "\n".join(lines) + "\n"
    if task.image:
        return f"FROM {task.image}\nWORKDIR {task.metadata.get('repo_dir', '/testbed')}\n"
    raise TaskError(f"task {task.instance_id} has neither a local repo nor an image; materialise it first")


def _write_repo(repo: Path, dest: Path) -> None:
    """The committed tree of ``repo`` at HEAD (what a sandbox starts from), without its history."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", "HEAD"], capture_output=True, env=git_env()
    )
    if proc.returncode != 0:
        raise TaskError(f"cannot read the repo {repo}: {proc.stderr.decode(errors='replace').strip()}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def export_task(task: Task, out: Path, *, base_image: str = DEFAULT_BASE_IMAGE) -> Path:
    """Write ``task`` (materialised: its ``repo_path`` set, or an image task) as a Harbor task directory
    under ``out``; return the directory. It must not exist yet."""
    if not task.patch.strip():
        raise TaskError(f"task {task.instance_id} has no gold patch to write as solution/solve.sh")
    spec = _pytest_spec(task)
    dockerfile = _dockerfile(task, base_image)
    final = out / task.instance_id
    if final.exists():
        raise TaskError(f"{final} exists; export into an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f".{task.instance_id}.", dir=out))
    try:
        if task.repo_path:
            _write_repo(Path(task.repo_path), d / "environment" / "repo")
        _write(d / "environment" / "Dockerfile", dockerfile)
        _write(d / "task.toml", _task_toml(task))
        _write(d / "instruction.md", task.problem_statement.rstrip("\n") + "\n")
        _write(d / "tests" / "test.sh", _TEST_SH.replace("{instance_id}", task.instance_id), 0o755)
        _write(d / "tests" / "lego_verify.py", _VERIFY_PY)
        _write(d / "tests" / "tests.json", json.dumps(spec, indent=2) + "\n")
        _write(d / "tests" / "test.patch", task.test_patch)
        _write(d / "solution" / "solve.sh", _SOLVE_SH.replace("{instance_id}", task.instance_id), 0o755)
        _write(d / "solution" / "fix.patch", task.patch)
        d.chmod(0o755)
        d.rename(final)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return final
