"""A parametrize table whose ids a function makes from its values (humanize 4.11.0:
``@pytest.mark.parametrize("test_args, expected", [...], ids=str)``): a perturbed row is renamed in the
run that perturbs it, like a table without ``ids``, so it must be matched to its row by position."""

from __future__ import annotations

from pathlib import Path

import pytest

from lego.sandboxes.grading import grade
from lego.sandboxes.perturb import find_sites
from lego.types import Task
from tests.sandboxes.sbx_fixtures import _patch, git_in

TABLE = """\
import pytest

from shapes import add


def _name(value):
    return "row-" + str(value)


@pytest.mark.parametrize("a, b, expected", [(1, 2, 3), (2, 2, 4), (0, 5, 5)], ids={ids})
def test_add(a, b, expected):
    assert add(a, b) == expected
"""


@pytest.mark.parametrize(
    ("ids", "stable"),
    [("str", False), ("_name", False), ("lambda v: repr(v)", False), ('["one", "two", "three"]', True)],
)
def test_ids_made_from_values_are_not_stable(ids: str, stable: bool) -> None:
    sites = [s for s in find_sites(TABLE.format(ids=ids), "tests/test_t.py") if s.rows is not None]
    assert sites and all(s.stable_ids is stable for s in sites)


def test_a_table_with_ids_made_from_its_values_is_graded(tmp_path: Path) -> None:
    repo = tmp_path / "shapes"
    for rel, text in {"shapes/__init__.py": "def add(a, b):\n    return a - b\n", "tests/__init__.py": ""}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git_in(repo, "init", "-q")
    git_in(repo, "add", "-A")
    git_in(repo, "commit", "-qm", "base")
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
    for _ in range(3):  # fresh draws each time: any row may be the perturbed one
        gold = grade(task, task.patch)
        assert gold.reward == 1.0, gold.log
        assert not gold.tampered
    assert grade(task, "").reward == 0.0
