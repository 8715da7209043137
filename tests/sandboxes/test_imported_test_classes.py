"""A test class imported into another test module is collected there too, under that module's name
(itsdangerous 2.2.0: ``from test_itsdangerous.test_serializer import TestSerializer`` in test_timed.py
runs ``test_timed.py::TestSerializer::test_alt_salt[...]``). It runs the definition of the module it came
from, and its blind copy (the grader renames test classes) must follow the import."""

from __future__ import annotations

from pathlib import Path

from lego.sandboxes.grading import grade
from lego.types import Task
from tests.sandboxes.sbx_fixtures import _patch, git_in

BASE = """\
from shapes import add


class TestAdd:
    def test_add(self):
        assert add(2, 3) == 5

    def test_add_more(self):
        assert add(1, 1) == 2
"""
MORE = """\
from tests.test_base import TestAdd
import tests.test_base as base


class TestMore(TestAdd):
    def test_zero(self):
        assert add_zero() == 0


class TestAliased(base.TestAdd):
    pass


def add_zero():
    from shapes import add

    return add(0, 0)
"""


def test_an_imported_test_class_is_graded_by_its_definition(tmp_path: Path) -> None:
    repo = tmp_path / "shapes"
    for rel, text in {
        "shapes/__init__.py": "def add(a, b):\n    return a - b\n",
        "tests/__init__.py": "",
        "tests/test_other.py": "def test_other():\n    pass\n",
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git_in(repo, "init", "-q")
    git_in(repo, "add", "-A")
    git_in(repo, "commit", "-qm", "base")
    ids = [
        f"tests/{f}::{c}::{t}"
        for f, c in [("test_base.py", "TestAdd"), ("test_more.py", "TestAdd"), ("test_more.py", "TestMore")]
        for t in ("test_add", "test_add_more")
    ]
    task = Task(
        instance_id="imported",
        repo="real/imported",
        problem_statement="add returns the difference",
        patch=_patch(repo, "shapes/__init__.py", "def add(a, b):\n    return a + b\n"),
        test_patch=_patch(repo, "tests/test_base.py", BASE) + _patch(repo, "tests/test_more.py", MORE),
        repo_path=str(repo),
        FAIL_TO_PASS=[
            *ids,
            "tests/test_more.py::TestAliased::test_add",
            "tests/test_more.py::TestAliased::test_add_more",
        ],
        PASS_TO_PASS=["tests/test_more.py::TestMore::test_zero"],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0, gold.log
    assert gold.behavioural == 8 and not gold.tampered, gold.log
    assert grade(task, "").reward == 0.0
