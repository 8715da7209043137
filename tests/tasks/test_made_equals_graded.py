"""Made = graded (issue 44): the suite runs that make a task see the environment the grader's sandbox
gives its test runs, not the host terminal's. A project's colour, locale and width tests (TERM, CI,
COLUMNS, FORCE_COLOR, TZ) passed at make time under the host's terminal and then failed every grade."""

from __future__ import annotations

from pathlib import Path

import pytest

from lego.sandboxes.grading import grade
from lego.tasks.testrun import run_pytest
from lego.types import Task
from tests.sandboxes.sbx_fixtures import _patch, commit_tree

TERMINAL_TEST = """\
import os

from term import styled


def test_plain_output_without_a_colour_terminal():
    assert os.environ.get("TERM") == "dumb" and os.environ.get("LANG") == "C.UTF-8"
    for host_only in ("COLUMNS", "CI", "FORCE_COLOR", "TZ", "PYTEST_ADDOPTS"):
        assert host_only not in os.environ, host_only
    assert styled("x") == "x"
"""
BUGGY = "import os\n\n\ndef styled(text):\n    return '\\x1b[1m' + text\n"
FIXED = (
    "import os\n\n\ndef styled(text):\n"
    "    return text if os.environ.get('TERM') == 'dumb' else '\\x1b[1m' + text + '\\x1b[0m'\n"
)


def test_a_suite_run_at_make_time_sees_the_graders_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"TERM": "xterm-256color", "COLUMNS": "211", "CI": "true", "FORCE_COLOR": "1", "TZ": "Asia/Tokyo",
                       "PYTEST_ADDOPTS": "-x"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    repo = commit_tree(tmp_path / "term", {"term.py": FIXED, "tests/test_term.py": TERMINAL_TEST})
    made = run_pytest(repo, timeout=120)
    assert made.statuses == {"tests/test_term.py::test_plain_output_without_a_colour_terminal": "passed"}, made.output
    (repo / "term.py").write_text(BUGGY)
    task = Task(
        instance_id="term-plain",
        repo="x/term",
        problem_statement="styled() writes escape codes to a dumb terminal",
        patch=_patch(repo, "term.py", FIXED),
        test_patch="",
        FAIL_TO_PASS=["tests/test_term.py::test_plain_output_without_a_colour_terminal"],
        repo_path=str(commit_tree(tmp_path / "buggy", {"term.py": BUGGY, "tests/test_term.py": TERMINAL_TEST})),
    )
    task = task.model_copy(update={"patch": _patch(Path(task.repo_path or ""), "term.py", FIXED)})
    assert grade(task, task.patch).reward == 1.0  # the environment the task was made in is the one it is graded in
    assert grade(task, "").reward == 0.0
