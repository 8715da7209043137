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


def _add_task(repo: Path, name: str, hidden: str, text: str, f2p: list[str], p2p: list[str] | None = None) -> Task:
    """The task of ``_shapes(repo)``: fix ``add``, graded by the hidden file ``hidden`` holding ``text``."""
    return Task(
        instance_id=name,
        repo=f"real/{name}",
        problem_statement="add returns the difference",
        patch=_patch(repo, "shapes/__init__.py", "def add(a, b):\n    return a + b\n"),
        test_patch=_patch(repo, hidden, text),
        repo_path=str(repo),
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p or [],
    )


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
    rows = [f"tests/test_t.py::test_add[{row}]" for row in ("1-2-3", "2-2-4", "0-5-5")]
    task = _add_task(repo, "tableids", "tests/test_t.py", TABLE.format(ids="str"), rows)
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
    expected = ["tests/test_t.py::test_add[7-8-15]", "tests/test_t.py::test_add[2999-3000-5999]"]
    task = _add_task(repo, "bigtable", "tests/test_t.py", table, expected)
    gold = grade(task, task.patch)
    assert gold.reward == 1.0 and gold.behavioural == 2, gold.log
    assert gold.log.count("2 passed") == 2 and "3000 passed" not in gold.log  # as written and blind
    assert grade(task, "").reward == 0.0


SET_TABLE = """\
import os
import sys
from datetime import date

import pytest

from shapes import add

CASES = {
    (1, "one", date(2001, 1, 1)), (2, "two", date(2002, 2, 2)), (3, "three", date(2003, 3, 3)),
    (4, "four", date(2004, 4, 4)), (5, "five", date(2005, 5, 5)), (6, "six", date(2006, 6, 6)),
    (7, "seven", date(2007, 7, 7)), (8, "eight", date(2008, 8, 8)), (9, "nine", date(2009, 9, 9)),
}


def test_sum():
    assert add(2, 3) == 5


def test_one_hash_seed():
    assert os.environ.get("PYTHONHASHSEED") == "0" and not sys.flags.hash_randomization


@pytest.mark.parametrize("n, word, day", CASES)
def test_rows(n, word, day):
    assert add(n, 0) == n
    assert day.year == 2000 + n
"""


def test_a_set_table_collects_in_one_order_in_every_run(tmp_path: Path) -> None:
    """isodate's parametrize tables are sets of tuples of strings: their rows, and ids made from the
    iteration index (``day3``), come out in the order of the run's string hash seed. Every graded run
    has the same seed (PYTHONHASHSEED reaches the test process), so the gold patch's runs and the
    agent's line up; with a seed per run (``python -I`` dropped the variable) the gold patch scored 0
    now and then: a row "missing" from the blind copy."""
    import os
    import subprocess
    import sys

    from lego.sandboxes.grading import forget_reference

    repo = _shapes(tmp_path / "repo")
    fixed = tmp_path / "fixed"
    commit_tree(
        fixed,
        {
            "shapes/__init__.py": "def add(a, b):\n    return a + b\n",
            "tests/__init__.py": "",
            "tests/test_set.py": SET_TABLE,
        },
    )
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_set.py"],
        cwd=fixed, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [line for line in listed.stdout.splitlines() if "::test_rows[" in line]
    assert len(rows) == 9 and any("day" in r for r in rows)
    f2p = ["tests/test_set.py::test_sum", "tests/test_set.py::test_one_hash_seed"]
    task = _add_task(repo, "set-table", "tests/test_set.py", SET_TABLE, f2p, rows)
    for _ in range(3):  # each time a fresh reference (three runs) and the gold patch's two
        forget_reference(task)
        gold = grade(task, task.patch)
        assert gold.reward == 1.0 and not gold.tampered, gold.log[-3000:]
    assert grade(task, "").reward == 0.0
