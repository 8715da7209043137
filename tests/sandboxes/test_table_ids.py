"""A parametrize table whose ids a function makes from its values (humanize 4.11.0:
``@pytest.mark.parametrize("test_args, expected", [...], ids=str)``): the ids carry the expected values,
so the blind copy names its rows ``p0r<row>`` and the grader matches them to the rows as written by
position."""

from __future__ import annotations

from pathlib import Path

import pytest

from lego.sandboxes.blind import blind_copy
from lego.sandboxes.grading import grade
from lego.types import Task
from tests.sandboxes.sbx_fixtures import _patch, commit_tree

TABLE = """\
import pytest

from shapes import add


def _name(value):
    return "row-" + str(value)


@pytest.mark.parametrize("a, b, expected", [(1, 2, 3), (2, 2, 4), (0, 5, 5)], ids={ids})
def test_add(a, b, expected):
    assert add(a, b) == expected
"""


def _shapes(repo: Path) -> Path:
    """A one-commit repo whose ``add`` subtracts."""
    return commit_tree(repo, {"shapes/__init__.py": "def add(a, b):\n    return a - b\n", "tests/__init__.py": ""})


@pytest.mark.parametrize(
    ("ids", "stable"),
    [("str", False), ("_name", False), ("lambda v: repr(v)", False), ('["one", "two", "three"]', True)],
)
def test_the_blind_copy_names_rows_by_position_whatever_the_ids_were(ids: str, stable: bool) -> None:
    text = blind_copy({"tests/test_t.py": TABLE.format(ids=ids)}).texts["tests/test_t.py"]
    assert "ids=['p0r0', 'p0r1', 'p0r2']" in text
    assert '"one"' not in text and ", 3)" not in text and "ids=str" not in text


def test_a_table_with_ids_made_from_its_values_is_graded(tmp_path: Path) -> None:
    repo = _shapes(tmp_path / "shapes")
    task = Task(
        instance_id="tableids",
        repo="real/tableids",
        problem_statement="add returns the difference",
        patch=_patch(repo, "shapes/__init__.py", "def add(a, b):\n    return a + b\n"),
        test_patch=_patch(repo, "tests/test_t.py", TABLE.format(ids="str")),
        repo_path=str(repo),
        FAIL_TO_PASS=[f"tests/test_t.py::test_add[{row}]" for row in ("1-2-3", "2-2-4", "0-5-5")],
        PASS_TO_PASS=[],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0, gold.log
    assert not gold.tampered and gold.behavioural == 3
    assert grade(task, "").reward == 0.0


def test_only_the_expected_rows_of_a_large_table_run(tmp_path: Path) -> None:
    """Issue 44: a hidden file with thousands of parametrized instances runs the ones the task names, as
    written and blind (by position), not every instance of their function."""
    repo = _shapes(tmp_path / "big")
    table = "import pytest\n\nfrom shapes import add\n\nROWS = [(i, i + 1, 2 * i + 1) for i in range(3000)]\n\n\n"
    table += '@pytest.mark.parametrize("a, b, out", ROWS)\ndef test_add(a, b, out):\n    assert add(a, b) == out\n'
    task = Task(
        instance_id="bigtable",
        repo="real/bigtable",
        problem_statement="add returns the difference",
        patch=_patch(repo, "shapes/__init__.py", "def add(a, b):\n    return a + b\n"),
        test_patch=_patch(repo, "tests/test_t.py", table),
        repo_path=str(repo),
        FAIL_TO_PASS=["tests/test_t.py::test_add[7-8-15]", "tests/test_t.py::test_add[2999-3000-5999]"],
        PASS_TO_PASS=[],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0 and gold.behavioural == 2, gold.log
    assert gold.log.count("2 passed") == 2 and "3000 passed" not in gold.log  # as written and blind
    assert grade(task, "").reward == 0.0
