"""What a tool result's text says: its exit code, the test run it reports, the Python traceback it ends in.

    exit_code("exit code 1\n...")                # 1 (lego-agent's shape; see below for the others)
    parse_test_run(pytest_output)                # TestRun(runner="pytest", passed=1, failed=1, ...), or None
    parse_traceback(text)                        # PyTraceback("ModuleNotFoundError", "No module named 'x'")

An exit code, where the text shows one on a line of its own (the first such line), in the shapes
harnesses print it (lego-agent ``exit code N``, Claude Code ``Exit code N``, Codex
``Exit code: N``, Gemini CLI ``Exit Code: N``, OpenHands ``[Command finished with exit code N]``,
mini-swe-agent ``<returncode>N</returncode>``; a structured result's ``exit_code`` field is read
by :func:`lego.learn.signals.result_text`); a test run (:func:`parse_test_run`: pytest's terminal summary line "N failed, M
passed in Ts", with the per-test statuses from swebench's ``parse_log_pytest`` when the swebench
package is installed, or unittest's "Ran N tests" with its OK / FAILED line); the last Python
traceback's exception type and message.

Each parser reads the *last* thing of its kind (a result may hold several runs: the latest one is
what the command ended with), and none guesses: a truncated pytest log without its summary line
is no test run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["PyTraceback", "TestRun", "exit_code", "parse_test_run", "parse_traceback"]


@dataclass(frozen=True)
class TestRun:
    """A test runner's verdict as its output states it. ``tests``: per-test statuses (passed,
    failed, error, skipped) where the output lists them (pytest's short summary, ``-rA``)."""

    runner: Literal["pytest", "unittest"]
    passed: int
    failed: int
    errors: int
    skipped: int
    summary: str
    """The summary line(s) as printed."""
    tests: Mapping[str, str] = field(default_factory=dict)

    @property
    def red(self) -> bool:
        """Some test failed or errored."""
        return self.failed + self.errors > 0

    @property
    def green(self) -> bool:
        """Tests ran and none failed or errored."""
        return not self.red and self.passed > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "runner": self.runner,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": self.skipped,
            "summary": self.summary,
            # Pairs, not an object: a test named like a secret (test_token_refresh) is no secret key.
            "tests": [[name, status] for name, status in self.tests.items()],
        }


@dataclass(frozen=True)
class PyTraceback:
    """The exception a Python traceback ended in."""

    exc_type: str
    message: str


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXIT_LINE = re.compile(
    r"(?im)^[ \t]*(?:\[command finished with exit code[ \t]+(-?\d+)\]"
    r"|<returncode>[ \t]*(-?\d+)[ \t]*</returncode>"
    r"|exit[ \t_]?code:?[ \t]+(-?\d+)"
    r"|process exited with code[ \t]+(-?\d+))[ \t]*$"
)


def exit_code(text: str) -> int | None:
    """The exit code a result's text shows on a line of its own (the first such line), or None."""
    m = _EXIT_LINE.search(text)
    if m is None:
        return None
    return int(next(g for g in m.groups() if g is not None))


_PYTEST_SUMMARY = re.compile(
    r"^=*[ \t]*((?:\d+ (?:failed|passed|skipped|deselected|xfailed|xpassed|warnings?|errors?|rerun)(?:, )?)+)"
    r"[ \t]+in[ \t]+[\d.]+s(?:[ \t]+\([^)\n]*\))?[ \t]*=*[ \t]*$",
    re.M,
)
_COUNT = re.compile(r"(\d+) (\w+)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s[ \t]*$", re.M)
_UNITTEST_END = re.compile(r"^(OK|FAILED)(?: \(([^)\n]*)\))?[ \t]*$", re.M)


def parse_test_run(text: str) -> TestRun | None:
    """The last test run a result's text reports (pytest's terminal summary, else unittest's), or None."""
    text = _ANSI.sub("", text)
    summaries = list(_PYTEST_SUMMARY.finditer(text))
    if summaries:
        last = summaries[-1]
        counts: dict[str, int] = {}
        for n, word in _COUNT.findall(last.group(1)):
            counts[word.rstrip("s") if word.startswith(("warning", "error")) else word] = int(n)
        # The per-test lines of this run: those printed before its summary (a log may hold several runs).
        start = summaries[-2].end() if len(summaries) > 1 else 0
        return TestRun(
            runner="pytest",
            passed=counts.get("passed", 0) + counts.get("xpassed", 0),
            failed=counts.get("failed", 0),
            errors=counts.get("error", 0),
            skipped=counts.get("skipped", 0) + counts.get("xfailed", 0),
            summary=last.group(0).strip(),
            tests=_pytest_statuses(text[start : last.end()]),
        )
    ran = list(_UNITTEST_RAN.finditer(text))
    if ran:
        end = _UNITTEST_END.search(text, ran[-1].end())
        if end is None:
            return None
        detail = dict(
            (k.strip(), int(v)) for k, v in (p.split("=", 1) for p in (end.group(2) or "").split(",") if "=" in p)
        )
        total = int(ran[-1].group(1))
        failed, errors = detail.get("failures", 0), detail.get("errors", 0)
        skipped = detail.get("skipped", 0) + detail.get("expected failures", 0)
        return TestRun(
            runner="unittest",
            passed=max(total - failed - errors - skipped, 0),
            failed=failed,
            errors=errors,
            skipped=skipped,
            summary=f"{ran[-1].group(0).strip()} / {end.group(0).strip()}",
        )
    return None


_SWEBENCH_STATUS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "skipped"}


def _pytest_statuses(log: str) -> dict[str, str]:
    """Per-test statuses from a pytest log, by swebench's parser (empty without the swebench package)."""
    try:
        from swebench.harness.log_parsers import parse_log_pytest
    except ImportError:
        return {}
    raw = parse_log_pytest(log, None)
    return {str(test): _SWEBENCH_STATUS.get(str(status), str(status).lower()) for test, status in raw.items()}


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):[ \t]*$", re.M)
_EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::[ \t]?(.*))?$")


def parse_traceback(text: str) -> PyTraceback | None:
    """The exception the last Python traceback in ``text`` ended in (chained ones: the one raised last)."""
    heads = list(_TRACEBACK.finditer(text))
    if not heads:
        return None
    for line in text[heads[-1].end() :].splitlines():
        if not line.strip() or line[:1] in " \t":
            continue  # the frames, indented
        m = _EXCEPTION_LINE.match(line.rstrip())
        return PyTraceback(exc_type=m.group(1), message=(m.group(2) or "").strip()) if m else None
    return None
