"""Running a library's pytest suite in a scratch copy and reading per-test results from junit XML.

Used by the bug injector (gold and mutant runs) and by ``lego tasks validate`` when the sandbox
grader is not available. Results come from the structured report, never from parsing console text.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SuiteResult", "copy_tree", "parse_junit", "run_pytest", "suite_env"]

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".git")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")

# A test stuck past 5 s (a mutant's infinite loop) ends the whole run at once: thread method. Found,
# not imported: importing it imports pytest, a fifth of a second every `lego` command would pay.
_TIMEOUT_ARGS = (
    ["--timeout=5", "-o", "timeout_method=thread"] if importlib.util.find_spec("pytest_timeout") is not None else []
)


@dataclass
class SuiteResult:
    """Per-test status (passed|failed|error|skipped), the failure message of each non-passing test and
    each test's duration in seconds."""

    statuses: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    timed_out: bool = False
    exit_code: int = 0
    output: str = ""

    def passed(self) -> set[str]:
        return {t for t, s in self.statuses.items() if s == "passed"}

    def failing(self) -> set[str]:
        return {t for t, s in self.statuses.items() if s in ("failed", "error")}


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a source tree without caches or git metadata (file modes are not preserved)."""
    shutil.copytree(src, dst, ignore=_IGNORED, copy_function=shutil.copyfile, dirs_exist_ok=True)


def _node_id(case: ET.Element, root: Path | None = None) -> str:
    """The node id of a junit test case. ``classname`` is the node id's own path and classes, dotted;
    ``file`` is where the test *function* is defined, which for a method a class inherits from a mixin
    in another file (``tests/test_lru.py::LRUCacheTest::test_copy`` running ``tests/__init__.py``'s
    ``CacheTestMixin.test_copy``) is not the node's file: there the file is the longest dotted prefix of
    ``classname`` that is a ``.py`` file under ``root``."""
    file = case.get("file") or ""
    classname = case.get("classname") or ""
    name = case.get("name") or ""
    if file and not file.endswith(".py"):  # a doctest of a text file (--doctest-glob): FILE::NAME
        return f"{file}::{name}"
    module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
    dotted = classname.split(".")
    node_file = None
    in_own_file = bool(module) and (classname == module or classname.startswith(module + "."))
    if root is not None and not in_own_file:  # the file system is asked only for an inherited test
        node_file = next(
            (k for k in range(len(dotted), 0, -1) if (root / ("/".join(dotted[:k]) + ".py")).is_file()), None
        )
    if in_own_file:
        inner = classname[len(module) :].strip(".")
    elif node_file is not None:
        file, inner = "/".join(dotted[:node_file]) + ".py", ".".join(dotted[node_file:])
    else:
        module_path = classname.replace(".", "/")
        file = file or module_path + ".py"
        inner = ""
    parts = [file, *([p for p in inner.split(".") if p]), name]
    return "::".join(parts)


def parse_junit(xml_text: str, scrub: str = "") -> SuiteResult:
    """Per-test results from a pytest junit XML report (``-o junit_family=xunit1`` gives file names).

    ``scrub`` (the repo's directory: node ids are relative to it) and memory addresses are removed
    from messages so that the same failure reads the same on every run.
    """
    result = SuiteResult()
    root = ET.fromstring(xml_text)
    for case in root.iter("testcase"):
        node = _node_id(case, Path(scrub) if scrub else None)
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
                text_lines = (child.text or "").strip().splitlines()
                message = child.get("message") or (text_lines[-1] if text_lines else "")
                break
            if child.tag == "skipped":
                status = "skipped"
        if scrub:
            message = message.replace(scrub.rstrip("/") + "/", "").replace(scrub, "")
        result.statuses[node] = status
        try:
            result.durations[node] = float(case.get("time") or 0.0)
        except ValueError:
            result.durations[node] = 0.0
        if message:
            result.messages[node] = _ADDRESS.sub("0x…", message)
    return result


def suite_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a suite runs in when a task is made: the one the grader's sandbox gives its test
    runs (:func:`lego.sandboxes.processes.agent_env`: ``TERM=dumb``, ``LANG=C.UTF-8``, a fresh ``HOME``,
    no ``TZ``, ``COLUMNS``, ``CI``, ``NO_COLOR`` or ``PYTEST_*`` of the host's), with the host's PATH so
    the environment's interpreter is found. A suite whose colour, locale or width tests passed under the
    host's terminal at make time would otherwise fail every grade."""
    from lego.sandboxes.processes import agent_env

    base = agent_env(os.environ.get("PATH", os.defpath), str(home), None, None)
    return {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", **(extra or {})}


def run_pytest(
    repo: Path,
    test_ids: list[str] | None = None,
    timeout: float = 120.0,
    python: str | None = None,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> SuiteResult:
    """Run pytest in ``repo`` (all tests, or ``test_ids``) and return per-test results.

    ``args`` go before the test ids (later options win over the defaults here); ``env`` is added to
    the environment last (a task environment's PYTHONPATH, plugin autoload switched off).
    A run that exceeds ``timeout`` is killed with its process group and reported ``timed_out``.
    """
    with tempfile.TemporaryDirectory(prefix="lego-junit-") as report_dir:
        xml_path = Path(report_dir) / "report.xml"
        cmd = [
            python or sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "junit_family=xunit1",
            f"--junitxml={xml_path}",
            *_TIMEOUT_ARGS,
            *args,
            *(test_ids or []),
        ]
        home = Path(report_dir) / "home"
        home.mkdir()
        run_env = suite_env(home, env)
        proc = subprocess.Popen(
            cmd,
            cwd=repo,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            output, _ = proc.communicate()
            return SuiteResult(timed_out=True, exit_code=-9, output=output[-4000:])
        if not xml_path.exists():
            hung = "+ Timeout +" in output
            return SuiteResult(timed_out=hung, exit_code=proc.returncode, output=output[-4000:])
        result = parse_junit(xml_path.read_text(encoding="utf-8"), scrub=str(repo))
        result.exit_code = proc.returncode
        result.output = output[-4000:]
        if any("Timeout" in m for m in result.messages.values()):
            result.timed_out = True
        return result
