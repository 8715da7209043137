"""The bridge to the ``swebench`` package (optional extra ``lego-rl[swebench]``).

lego reads SWE-bench-format JSONL itself (the format is plain JSON); ``swebench`` supplies the
field-name constants and, for tasks whose tests print a log rather than a junit report (SWE-bench
Docker images), the per-repository test-log parsers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lego.errors import TaskError

__all__ = ["REQUIRED_FIELDS", "TEST_STATUS", "available", "log_parser", "parse_test_log"]

REQUIRED_FIELDS = ("instance_id", "repo", "problem_statement", "patch")
"""Fields every instance must have (the rest default)."""

TEST_STATUS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "skipped"}
"""swebench's TestStatus values -> lego's per-test statuses (GradeResult.tests)."""

_HINT = "install the extra: pip install 'lego-rl[swebench]' (or: pip install swebench)"


def available() -> bool:
    try:
        import swebench.harness.log_parsers  # noqa: F401
    except ImportError:
        return False
    return True


def _repo_parsers() -> dict[str, Callable[..., dict[str, str]]]:
    try:
        from swebench.harness import log_parsers
    except ImportError as exc:
        raise TaskError(f"parsing SWE-bench test logs needs the swebench package; {_HINT}") from exc
    merged: dict[str, Callable[..., dict[str, str]]] = {}
    for module_name in ("python", "javascript", "go", "java", "php", "ruby", "rust", "c"):
        module: Any = getattr(log_parsers, module_name, None)
        for attr in dir(module) if module is not None else []:
            if attr.startswith("MAP_REPO_TO_PARSER"):
                merged.update(getattr(module, attr))
    return merged


def log_parser(repo: str) -> Callable[..., dict[str, str]]:
    """swebench's log parser for ``repo`` (``owner/name``); plain pytest for repos it does not list."""
    parsers = _repo_parsers()
    if repo in parsers:
        return parsers[repo]
    from swebench.harness.log_parsers import parse_log_pytest

    return parse_log_pytest  # type: ignore[no-any-return]


def parse_test_log(repo: str, log: str) -> dict[str, str]:
    """Per-test statuses (passed|failed|error|skipped) from a test run's console log."""
    raw = log_parser(repo)(log, None)
    return {test: TEST_STATUS.get(str(status), str(status).lower()) for test, status in raw.items()}
