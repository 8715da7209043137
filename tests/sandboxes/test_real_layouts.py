"""What real projects' repositories do that lego's own tasks never did, graded in real sandboxes:
a src/ layout, a package that the grader's own interpreter also has installed, pytest configuration
and conftest fixtures of the project, subtests, ids with spaces as swebench writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lego.config import SandboxConfig
from lego.sandboxes.grading import grade
from lego.sandboxes.local import LocalSandbox
from lego.types import Task, TaskEnvironment
from tests.sandboxes.sbx_fixtures import _patch, commit_tree

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def _project(root: Path, name: str, files: dict[str, str], hidden: dict[str, str], fix: tuple[str, str], **kw) -> Task:  # type: ignore[no-untyped-def]
    repo = commit_tree(root / name, files)
    test_patch = ""
    for rel, text in hidden.items():
        test_patch += _patch(repo, rel, text)
    return Task(
        instance_id=name,
        repo=f"real/{name}",
        problem_statement="add returns the difference",
        patch=_patch(repo, *fix),
        test_patch=test_patch,
        repo_path=str(repo),
        **kw,
    )


def test_src_layout_is_importable_for_the_agent_and_the_grader(tmp_path: Path) -> None:
    task = _project(
        tmp_path,
        "srclayout",
        {"src/mathy/__init__.py": BUGGY, "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = ['tests']\n"},
        {"tests/test_add.py": "from mathy import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"},
        ("src/mathy/__init__.py", FIXED),
        FAIL_TO_PASS=["tests/test_add.py::test_add"],
        environment=TaskEnvironment(import_roots=["src"]),
    )
    assert grade(task, task.patch).reward == 1.0
    assert grade(task, "").reward == 0.0
    sb = LocalSandbox(task, SandboxConfig())
    try:  # the agent's python sees the package as a developer's checkout does
        run = sb.exec(["python", "-c", "import mathy, sys; print(mathy.__file__)"])
        assert run.exit_code == 0 and run.stdout.strip() == "/repo/src/mathy/__init__.py", run.stderr
    finally:
        sb.close()


def test_the_repo_is_the_code_under_test_even_when_the_grader_has_the_project_installed(tmp_path: Path) -> None:
    """iniconfig is installed beside pytest (pytest imports it at start-up); a task *on* iniconfig must
    test the repo's copy, or every diff, the empty one too, is graded against the installed one."""
    import iniconfig

    src = Path(iniconfig.__file__).parent
    files = {f"iniconfig/{p.name}": p.read_text() for p in src.glob("*.py")}
    fixed = files["iniconfig/_parse.py"]
    assert "value = value.strip()" in fixed
    files["iniconfig/_parse.py"] = fixed.replace("value = value.strip()", "value = value.rstrip()")
    hidden = "from iniconfig import IniConfig\n\n\ndef test_value_is_stripped():\n    assert IniConfig('x', data='[a]\\nb = 1\\n')['a']['b'] == '1'\n"
    task = _project(
        tmp_path,
        "shadow",
        files,
        {"testing/test_strip.py": hidden},
        ("iniconfig/_parse.py", fixed),
        FAIL_TO_PASS=["testing/test_strip.py::test_value_is_stripped"],
    )
    assert grade(task, "").reward == 0.0
    assert grade(task, task.patch).reward == 1.0


CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef pair():\n    return (2, 3)\n"
SUBTESTS = (
    "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_many(self):\n"
    "        for a, b in ((1, 1), (2, 3)):\n            with self.subTest(a=a, b=b):\n                self.assertEqual(add(a, b), a + b)\n"
)
PARAMS = (
    "import pytest\nfrom calc import add\n\n\n@pytest.mark.parametrize('words', ['a b', 'é ü'])\n"
    "def test_spaced(words, pair):\n    assert add(*pair) == 5\n\n\ndef test_ünicode(pair):\n    assert add(*pair) == 5\n"
)


def test_conftest_fixtures_subtests_and_spaced_ids(tmp_path: Path) -> None:
    task = _project(
        tmp_path,
        "realish",
        {"calc/__init__.py": BUGGY, "tests/conftest.py": CONFTEST, "tox.ini": "[pytest]\naddopts = -ra\n"},
        {"tests/test_sub.py": SUBTESTS, "tests/test_params.py": PARAMS},
        ("calc/__init__.py", FIXED),
        # as swebench's parse_log_pytest writes them: cut at the first space (pytest escapes the é of an id)
        FAIL_TO_PASS=[
            "tests/test_sub.py::T::test_many",
            "tests/test_params.py::test_spaced[a",
            "tests/test_params.py::test_spaced[\\xe9",
            "tests/test_params.py::test_ünicode",
        ],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0 and not gold.tampered, gold.log[-3000:]
    empty = grade(task, "")
    assert empty.reward == 0.0 and not empty.tampered
    assert empty.tests["tests/test_sub.py::T::test_many"] == "failed"  # a failed subtest fails its test


MIXIN = """\
from mathy import add


class AddChecks:
    def test_add(self):
        assert add(2, 3) == 5

    def test_add_named(self):
        expected = 7
        assert add(3, 4) == expected
"""
SUITE = """\
import unittest
from contextlib import nullcontext

import pytest

from mathy import add
from tests import AddChecks


class TestAdd(unittest.TestCase, AddChecks):
    pass


class TestBase:
    def test_twice(self):
        assert add(add(1, 1), 2) == 4


class TestDerived(TestBase):
    pass


def test_input_and_expected_are_one_name():
    txt = 'abc'
    assert add(txt, '') == txt


@pytest.mark.parametrize("url", ["https://[::1]:80/?a=b", "plain"])
def test_early_return(url):
    if "?" not in url:
        return
    assert add(url, "") == url
    assert add(1, 1) == 2


@pytest.fixture(params=["http://[::1]:8/", "x"])
def test_url(request):
    return request.param


def test_fixture_ids(test_url):
    assert add(test_url, "")


def test_valid(check=add, offset=0):
    assert check(2, 2) == 4 + offset


def test_valid_shifted():
    test_valid(check=lambda a, b: add(a, b) + 1, offset=1)


@pytest.mark.parametrize("value, expectation", [(1, nullcontext(2)), ("x", pytest.raises(TypeError))])
def test_context_table(value, expectation):
    with expectation as expected:
        result = add(value, 1)
        assert result == expected


@pytest.mark.xfail(reason="reported skipped when it fails")
def test_known_bug():
    assert add(2, 2) == 4
"""


def test_what_real_suites_do_with_their_tests_is_graded_as_written(tmp_path: Path) -> None:
    """Seen on real projects' suites, each once zeroed the gold patch: test methods a class inherits,
    from a class of the same file (toolz) or a mixin in another file (cachetools' tests/__init__.py);
    a name that is the input as well as the expected value (python-slugify); an assertion after an
    early ``return`` (boltons); parametrised ids with brackets and colons, from a table or a fixture's
    params (boltons); a test that calls another test function with other arguments (toolz); assertions
    in a context manager taken from a table of pytest.raises and does_not_raise (semver); an xfail test,
    whose failure is reported skipped (sqlparse)."""
    ids = [
        "tests/test_suite.py::TestAdd::test_add",
        "tests/test_suite.py::TestAdd::test_add_named",
        "tests/test_suite.py::TestBase::test_twice",
        "tests/test_suite.py::TestDerived::test_twice",
        "tests/test_suite.py::test_input_and_expected_are_one_name",
        "tests/test_suite.py::test_early_return[https://[::1]:80/?a=b]",
        "tests/test_suite.py::test_early_return[plain]",
        "tests/test_suite.py::test_fixture_ids[http://[::1]:8/]",
        "tests/test_suite.py::test_fixture_ids[x]",
        "tests/test_suite.py::test_valid",
        "tests/test_suite.py::test_valid_shifted",
        "tests/test_suite.py::test_context_table[1-expectation0]",
        "tests/test_suite.py::test_known_bug",
        "tests/test_suite.py::test_context_table[x-expectation1]",
    ]
    task = _project(
        tmp_path,
        "inherit",
        {"mathy/__init__.py": BUGGY, "tests/__init__.py": "", "tests/test_other.py": "def test_other():\n    pass\n"},
        {"tests/__init__.py": MIXIN, "tests/test_suite.py": SUITE},
        ("mathy/__init__.py", FIXED),
        FAIL_TO_PASS=ids[:6] + ids[7:-1],
        PASS_TO_PASS=[ids[6], ids[-1]],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0, gold.log
    assert gold.behavioural >= 4 and not gold.tampered, gold.log
    assert grade(task, "").reward == 0.0


@pytest.mark.parametrize("script", ["grade_bootstrap.py", "grade_supervisor.py", "suite_profile.py"])
def test_the_scripts_that_run_on_the_tasks_interpreter_parse_as_python_3_6(script: str) -> None:
    """SWE-bench images carry Python 3.6 to 3.9: no walrus, no `X | Y` at run time, no match."""
    import ast

    import lego.sandboxes as pkg

    source = (Path(pkg.__file__).parent / script).read_text()
    tree = ast.parse(source, feature_version=(3, 6))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign | ast.NamedExpr | ast.Match)]
    assert "from __future__" not in source and "removeprefix" not in source


SELF_META = (
    "from importlib.metadata import entry_points, version\n\n__version__ = version('mathy-tools')\n"
    "PLUGINS = sorted(e.name for e in entry_points(group='mathy.plugins'))\n\n"
)
META_PYPROJECT = (
    "[project]\nname = 'mathy-tools'\nversion = '2.0.1'\n\n[project.entry-points.'mathy.plugins']\n"
    "double = 'mathy:add'\n\n[tool.pytest.ini_options]\ntestpaths = ['tests']\n"
)


def test_a_project_that_reads_its_own_metadata_at_import_is_graded_and_runs_for_the_agent(tmp_path: Path) -> None:
    """`__version__ = importlib.metadata.version(...)` at import (hatch, flit, poetry and pdm projects
    ship no egg-info): the project is not installed in its environment (the repo is the only copy of
    it), so without its dist-info on the path the import fails and every diff, the gold one too, is 0."""
    task = _project(
        tmp_path,
        "selfmeta",
        {"src/mathy/__init__.py": SELF_META + BUGGY, "pyproject.toml": META_PYPROJECT},
        {
            "tests/test_add.py": "import mathy\nfrom mathy import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
            "def test_meta():\n    assert mathy.__version__ == '2.0.1' and mathy.PLUGINS == ['double']\n"
        },
        ("src/mathy/__init__.py", SELF_META + FIXED),
        FAIL_TO_PASS=["tests/test_add.py::test_add"],
        PASS_TO_PASS=["tests/test_add.py::test_meta"],
        environment=TaskEnvironment(import_roots=["src"]),
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0, gold.log[-3000:]
    empty = grade(task, "")
    assert empty.reward == 0.0 and empty.tests["tests/test_add.py::test_meta"] == "passed"
    sb = LocalSandbox(task, SandboxConfig())
    try:  # the agent's python imports it too, and sees the same metadata
        run = sb.exec(["python", "-c", "import mathy; print(mathy.__version__, mathy.PLUGINS)"])
        assert run.exit_code == 0 and run.stdout.strip() == "2.0.1 ['double']", run.stderr
    finally:
        sb.close()


FROZEN_BUGGY = (
    "def members(names):\n    return frozenset(n for n in names if n != 'b')\n\n\ndef big():\n    return float('inf')\n"
)
FROZEN_FIXED = "def members(names):\n    return frozenset(names)\n\n\ndef big():\n    return float('inf')\n"
FROZEN_TESTS = """\
import unittest

from shapes import big, members


class T(unittest.TestCase):
    def test_members(self):
        self.assertEqual(members('abc'), {'a', 'b', 'c'})

    def test_one(self):
        assert members('x') == {'x'}

    def test_big(self):
        assert big() == 1e999
"""


def test_a_frozenset_compared_with_a_set_literal_is_not_read_as_tampering(tmp_path: Path) -> None:
    """typing_extensions' own tests compare frozenset results with set literals; the witness of such a
    value reads ``frozenset({...})`` (and a float's ``inf``), which no literal spells: the gold patch was
    zeroed as tampering ("witnessed frozenset({'a', 'b', 'c'}) ... not the true value")."""
    task = _project(
        tmp_path,
        "frozen",
        {"shapes/__init__.py": FROZEN_BUGGY},
        {"tests/test_members.py": FROZEN_TESTS},
        ("shapes/__init__.py", FROZEN_FIXED),
        FAIL_TO_PASS=["tests/test_members.py::T::test_members"],
        PASS_TO_PASS=["tests/test_members.py::T::test_one", "tests/test_members.py::T::test_big"],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0 and not gold.tampered, gold.log[-3000:]
    assert grade(task, "").reward == 0.0


LEAKY_TESTS = """\
import os
from contextlib import contextmanager

from calc import add


@contextmanager
def osname(name):  # as colorama's tests have it: no try/finally
    orig = os.name
    os.name = name
    yield
    os.name = orig


def test_add_on_windows():
    with osname("nt"):
        assert add(2, 3) == 5


def test_add_after():
    assert add(1, 1) == 2
"""


def test_a_test_that_leaks_os_name_when_it_fails_does_not_end_the_graded_run(tmp_path: Path) -> None:
    """A perturbed run fails assertions on purpose; one inside colorama's ``with osname("nt")`` left
    pytest on "Windows" (an INTERNALERROR at the next test: every later test missing, gold 0)."""
    task = _project(
        tmp_path,
        "leaky",
        {"calc/__init__.py": BUGGY},
        {"tests/test_leak.py": LEAKY_TESTS},
        ("calc/__init__.py", FIXED),
        FAIL_TO_PASS=["tests/test_leak.py::test_add_on_windows", "tests/test_leak.py::test_add_after"],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0 and "INTERNALERROR" not in gold.log, gold.log[-3000:]
    assert grade(task, "").reward == 0.0


MANY_TESTS = """\
import pytest

from calc import add

CASES = [(i, "a case with a long and descriptive name, number %05d" % i) for i in range(2500)]


@pytest.mark.parametrize("i,label", CASES, ids=[c[1] for c in CASES])
def test_add_many(i, label):
    assert add(i, 1) == i + 1
"""


def test_a_suite_of_thousands_of_expected_tests_is_graded(tmp_path: Path) -> None:
    """The expected ids went to the graded pytest as one command-line argument: over 128 KiB (Linux's
    MAX_ARG_STRLEN; a suite of ~2000 tests with real names) the exec failed and no grade was possible."""
    task = _project(
        tmp_path,
        "many",
        {"calc/__init__.py": BUGGY},
        {"tests/test_many.py": MANY_TESTS},
        ("calc/__init__.py", FIXED),
        FAIL_TO_PASS=[
            f"tests/test_many.py::test_add_many[a case with a long and descriptive name, number {i:05d}]"
            for i in range(2500)
        ],
    )
    gold = grade(task, task.patch)
    assert gold.reward == 1.0, gold.log[-3000:]
    assert grade(task, "").reward == 0.0


def test_the_graders_metadata_folder_is_removed_after_the_run_even_without_isolation(
    tmp_path: Path,
) -> None:
    """The bootstrap writes the project's dist-info to a temporary folder; in a bubblewrap sandbox that
    is the sandbox's own tmpfs, but unisolated (`sandbox.unsafe_no_isolation`) it is the host's /tmp,
    which kept one folder per graded run (264 here after one day of validation)."""
    task = _project(
        tmp_path,
        "selfmeta",
        {"src/mathy/__init__.py": SELF_META + BUGGY, "pyproject.toml": META_PYPROJECT},
        {"tests/test_add.py": "import mathy\nfrom mathy import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"},
        ("src/mathy/__init__.py", SELF_META + FIXED),
        FAIL_TO_PASS=["tests/test_add.py::test_add"],
        environment=TaskEnvironment(import_roots=["src"]),
    )

    def leftovers() -> set[Path]:  # this test's project only: other workers grade beside it
        return {d for d in Path("/tmp").glob("lego-meta-*") if any(d.glob("mathy_tools-*.dist-info"))}

    before = leftovers()
    gold = grade(task, task.patch, cfg=SandboxConfig(unsafe_no_isolation=True))
    assert gold.reward == 1.0, gold.log[-3000:]
    assert not leftovers() - before
