"""A test class imported into another test module is collected there too, under that module's name
(itsdangerous 2.2.0: ``from test_itsdangerous.test_serializer import TestSerializer`` in test_timed.py
runs ``test_timed.py::TestSerializer::test_alt_salt[...]``). It runs the definition of the module it came
from, so the grader must perturb and judge it by that definition."""

from __future__ import annotations

from pathlib import Path

from lego.sandboxes.grading import grade
from lego.sandboxes.perturb import Definitions, FilePlan, find_sites
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


def test_an_imported_class_s_tests_resolve_to_its_own_file() -> None:
    plans = [
        FilePlan(p, t, find_sites(t, p)) for p, t in {"tests/test_base.py": BASE, "tests/test_more.py": MORE}.items()
    ]
    defs = Definitions(plans)
    assert defs("tests/test_more.py::TestAdd::test_add") == ("tests/test_base.py", "TestAdd.test_add")
    assert defs("tests/test_more.py::TestMore::test_add") == ("tests/test_base.py", "TestAdd.test_add")
    assert defs("tests/test_more.py::TestAliased::test_add_more") == ("tests/test_base.py", "TestAdd.test_add_more")
    assert defs("tests/test_more.py::TestMore::test_zero") == ("tests/test_more.py", "TestMore.test_zero")
    assert defs("tests/test_more.py::TestUnknown::test_x") == ("tests/test_more.py", "TestUnknown.test_x")


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
    for _ in range(3):  # fresh draws each time
        gold = grade(task, task.patch)
        assert gold.reward == 1.0, gold.log
        assert gold.perturbed >= 2 and not gold.tampered
    assert grade(task, "").reward == 0.0
