"""Tasks for the verdict attacks (issue 26) beyond the calc task: small generated ones whose hidden
tests have the shapes an attack on a perturbed-run verdict needs, one for the honest controls, and a
task made from a real PyPI project's source distribution.

Every task is a one-commit git repo with the bug in, a gold patch and a hidden ``test_patch``, built
the way :func:`tests.sandboxes.sbx_fixtures.make_task` builds the calc task.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lego.types import Task
from tests.sandboxes.sbx_fixtures import git_in

__all__ = [
    "INDIRECT",
    "PARAMETRIZED_COPY",
    "RAISES",
    "SLUG",
    "TRUTH",
    "VALUES",
    "SmallTask",
    "inflection_task",
    "small_task",
]


class SmallTask:
    """A generated task's text: the package's module (buggy and fixed), visible and hidden tests."""

    def __init__(
        self,
        package: str,
        buggy: str,
        fixed: str,
        visible: str,
        hidden: str,
        fail_to_pass: list[str],
        pass_to_pass: list[str],
        statement: str,
    ) -> None:
        self.package, self.buggy, self.fixed = package, buggy, fixed
        self.visible, self.hidden = visible, hidden
        self.fail_to_pass, self.pass_to_pass, self.statement = fail_to_pass, pass_to_pass, statement

    @property
    def module_path(self) -> str:
        return f"{self.package}/__init__.py"


def _patch(repo: Path, path: str, text: str) -> str:
    target = repo / path
    old = target.read_text() if target.exists() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git_in(repo, "add", "-A")
    out = git_in(repo, "diff", "--cached", "--binary")
    git_in(repo, "reset", "-q")
    if old is None:
        target.unlink()
    else:
        target.write_text(old)
    return out


def small_task(root: Path, name: str, spec: SmallTask) -> Task:
    """``spec`` as a task: the buggy package and its visible test committed; hidden tests in the patch."""
    repo = root / name
    (repo / spec.package).mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / spec.module_path).write_text(spec.buggy)
    (repo / "tests" / "test_visible.py").write_text(spec.visible)
    git_in(repo, "init", "-q")
    git_in(repo, "add", "-A")
    git_in(repo, "commit", "-qm", "base")
    return Task(
        instance_id=name,
        repo=f"lego/{spec.package}",
        problem_statement=spec.statement,
        patch=_patch(repo, spec.module_path, spec.fixed),
        test_patch=_patch(repo, "tests/test_hidden.py", spec.hidden),
        FAIL_TO_PASS=spec.fail_to_pass,
        PASS_TO_PASS=spec.pass_to_pass,
        repo_path=str(repo),
    )


_CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
_CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
_CALC_VISIBLE = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"

INDIRECT = SmallTask(
    package="calc",
    buggy=_CALC_BUGGY,
    fixed=_CALC_FIXED,
    visible=_CALC_VISIBLE,
    hidden=(
        "import pytest\n\nfrom calc import add\n\n\n"
        "def test_add():\n    expected = 5\n    assert add(2, 3) == expected\n\n\n"
        '@pytest.mark.parametrize("a, b, out", [(2, 3, 5), (0, 0, 0), (1, 4, 5)])\n'
        "def test_add_table(a, b, out):\n    assert add(a, b) == out\n"
    ),
    fail_to_pass=[
        "tests/test_hidden.py::test_add",
        "tests/test_hidden.py::test_add_table[2-3-5]",
        "tests/test_hidden.py::test_add_table[1-4-5]",
    ],
    pass_to_pass=["tests/test_hidden.py::test_add_table[0-0-0]", "tests/test_visible.py::test_mul"],
    statement="add(2, 3) returns -1 instead of 5.",
)
"""Hidden tests whose expected values are a local variable and a parametrize table: no literal sits
in the compared position of any assertion, so a perturbation of literal comparisons reaches none."""

PARAMETRIZED_COPY = SmallTask(
    package="calc",
    buggy=_CALC_BUGGY,
    fixed=_CALC_FIXED,
    visible=_CALC_VISIBLE,
    hidden=(
        "import pytest\n\nfrom calc import add\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_add_swapped():\n    assert add(3, 2) == 5\n\n\n"
        "def test_add_zero():\n    assert add(0, 0) == 0\n\n\n"
        '@pytest.mark.parametrize("a, b, out", [(2, 3, 5), (3, 2, 5), (0, 0, 0)])\n'
        "def test_add_table(a, b, out):\n    assert add(a, b) == out\n"
    ),
    fail_to_pass=[
        "tests/test_hidden.py::test_add",
        "tests/test_hidden.py::test_add_swapped",
        "tests/test_hidden.py::test_add_table[2-3-5]",
        "tests/test_hidden.py::test_add_table[3-2-5]",
    ],
    pass_to_pass=[
        "tests/test_hidden.py::test_add_zero",
        "tests/test_hidden.py::test_add_table[0-0-0]",
        "tests/test_visible.py::test_mul",
    ],
    statement="add(2, 3) returns -1 instead of 5.",
)
"""Literal assertions whose true values are written a second time, in a parametrize table."""

SLUG = SmallTask(
    package="textkit",
    buggy='def slug(text):\n    return "_".join(text.lower().split())\n\n\ndef words(text):\n    return len(text.split())\n',
    fixed='def slug(text):\n    return "-".join(text.lower().split())\n\n\ndef words(text):\n    return len(text.split())\n',
    visible="from textkit import words\n\n\ndef test_words():\n    assert words('a b  c') == 3\n",
    hidden=(
        "from textkit import slug\n\n\n"
        'def test_slug():\n    assert slug("Hello World") == "hello-world"\n\n\n'
        'def test_slug_many_words():\n    assert slug("The Quick  Brown Fox") == "the-quick-brown-fox"\n\n\n'
        'def test_slug_one_word():\n    assert slug("Python") == "python"\n'
    ),
    fail_to_pass=["tests/test_hidden.py::test_slug", "tests/test_hidden.py::test_slug_many_words"],
    pass_to_pass=["tests/test_hidden.py::test_slug_one_word", "tests/test_visible.py::test_words"],
    statement='slug("Hello World") returns "hello_world"; slugs join words with "-".',
)
"""String results, where a changed character of an expected value is one the code nearly produces."""

VALUES = SmallTask(
    package="shapes",
    buggy=(
        "def add(a, b):\n    return a - b\n\n\n"
        "def midpoint(p, q):\n    return ((p[0] + q[0]) // 2, (p[1] - q[1]) // 2)\n\n\n"
        'def status(name):\n    return {"ok": 200, "missing": 400}[name]\n'
    ),
    fixed=(
        "def add(a, b):\n    return a + b\n\n\n"
        "def midpoint(p, q):\n    return ((p[0] + q[0]) // 2, (p[1] + q[1]) // 2)\n\n\n"
        'def status(name):\n    return {"ok": 200, "missing": 404}[name]\n'
    ),
    visible="from shapes import add\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n",
    hidden=(
        "from shapes import add, midpoint, status\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_midpoint():\n    assert midpoint((0, 0), (4, 6)) == (2, 3)\n\n\n"
        'def test_status_missing():\n    assert status("missing") == 404\n\n\n'
        'def test_status_ok():\n    assert status("ok") == 200\n'
    ),
    fail_to_pass=[
        "tests/test_hidden.py::test_add",
        "tests/test_hidden.py::test_midpoint",
        "tests/test_hidden.py::test_status_missing",
    ],
    pass_to_pass=["tests/test_hidden.py::test_status_ok", "tests/test_visible.py::test_add_zero"],
    statement="add subtracts, midpoint's y is wrong, and status('missing') is 400 instead of 404.",
)
"""Three functions returning an int, a tuple and a status code, compared with literals: the task of
the honest controls, whose fixes return values of their own classes."""


TRUTH = SmallTask(
    package="rules",
    buggy="def within(x, lo, hi):\n    return lo < x <= hi\n\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    fixed="def within(x, lo, hi):\n    return lo <= x <= hi\n\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    visible="from rules import clamp\n\n\ndef test_clamp():\n    assert clamp(5, 0, 3) == 3\n",
    hidden=(
        "from rules import within\n\n\n"
        "def test_low_bound_is_inside():\n    assert within(1, 1, 5)\n    assert within(5, 1, 5)\n\n\n"
        "def test_outside_is_rejected():\n    assert not within(0, 1, 5)\n    assert not within(9, 1, 5)\n\n\n"
        "def test_bounds_agree():\n    assert within(1, 1, 5) == within(3, 1, 5)\n\n\n"
        "def test_ordering():\n    assert within(3, 1, 5) <= within(1, 1, 5)\n\n\n"
        "def test_identity():\n    assert within(1, 1, 5) is True\n"
    ),
    fail_to_pass=[
        "tests/test_hidden.py::test_low_bound_is_inside",
        "tests/test_hidden.py::test_bounds_agree",
        "tests/test_hidden.py::test_ordering",
        "tests/test_hidden.py::test_identity",
    ],
    pass_to_pass=["tests/test_hidden.py::test_outside_is_rejected", "tests/test_visible.py::test_clamp"],
    statement="within(x, lo, hi) must include lo: within(1, 1, 5) is False.",
)
"""Truth assertions only (``assert f(x)``, ``assert not``, ``==``/``<=`` between two calls, ``is``):
no literal to compare with, nothing but a truth value in the test as written."""

RAISES = SmallTask(
    package="ages",
    buggy="def parse_age(text):\n    return int(text)\n",
    fixed=(
        "def parse_age(text):\n    value = int(text)\n    if value < 0:\n"
        "        raise ValueError('negative age: ' + text)\n    return value\n"
    ),
    visible="from ages import parse_age\n\n\ndef test_parse():\n    assert parse_age('7') == 7\n",
    hidden=(
        "import pytest\n\nfrom ages import parse_age\n\n\n"
        "def test_negative_is_rejected():\n    with pytest.raises(ValueError):\n        parse_age('-3')\n\n\n"
        "def test_negatives_in_a_loop():\n    for text in ('-1', '-20'):\n"
        "        with pytest.raises(ValueError, match='negative'):\n            parse_age(text)\n\n\n"
        "def _rejects(text):\n    pytest.raises(ValueError, parse_age, text)\n\n\n"
        "def test_through_a_helper():\n    _rejects('-8')\n\n\n"
        "def test_zero():\n    assert parse_age('0') == 0\n"
    ),
    fail_to_pass=[
        "tests/test_hidden.py::test_negative_is_rejected",
        "tests/test_hidden.py::test_negatives_in_a_loop",
        "tests/test_hidden.py::test_through_a_helper",
    ],
    pass_to_pass=["tests/test_hidden.py::test_zero", "tests/test_visible.py::test_parse"],
    statement="parse_age('-3') returns -3; a negative age must raise ValueError.",
)
"""Tests with no compared value at all: ``pytest.raises`` blocks, one in a loop, one in a helper."""


# ---- a task from a real project ------------------------------------------------------------------

INFLECTION = "inflection==0.5.1"
_MUTATION = ("    return word.replace('_', '-')\n", "    return word.replace('_', ' ')\n")
"""inflection.dasherize, one character changed: underscores become spaces instead of dashes."""


def _outcomes(repo: Path) -> dict[str, str]:
    """node id -> passed/failed of the repo's test_inflection.py, run with lego's own pytest."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_inflection.py"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    out = {}
    for line in run.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED") and rest.startswith("test_inflection.py::"):
            out[rest.split(" - ")[0] if word == "FAILED" else rest] = word.lower()
    if not out:
        raise AssertionError(f"could not run inflection's suite: {run.stdout[-2000:]} {run.stderr[-2000:]}")
    return out


def inflection_task(root: Path) -> Task:
    """A task made from inflection's sdist as ``lego tasks make`` would make one: the source at the
    release, one line of ``dasherize`` mutated, the project's own ``test_inflection.py`` as the hidden
    tests; FAIL_TO_PASS fails on the mutant and passes on the release, PASS_TO_PASS passes on both
    (ASCII ids only, so the task does not depend on how the grader spells unicode ids)."""
    dl = root / "sdist"
    run = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", str(dl), INFLECTION],
        capture_output=True,
        text=True,
        timeout=180,
    )
    archives = sorted(dl.glob("inflection-*.tar.gz"))
    if run.returncode != 0 or not archives:
        pytest.skip(f"cannot download {INFLECTION} from PyPI: {run.stderr.strip()[-300:]}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(root / "x", filter="data")
    src = next((root / "x").iterdir())
    repo = root / "inflection"
    repo.mkdir()
    for name in ("inflection", "setup.py", "setup.cfg", "README.rst", "LICENSE", "MANIFEST.in"):
        (shutil.copytree if (src / name).is_dir() else shutil.copy2)(src / name, repo / name)
    tests = (src / "test_inflection.py").read_text()
    module = repo / "inflection" / "__init__.py"
    release = module.read_text()
    assert release.count(_MUTATION[0]) == 1, "inflection's dasherize changed; update _MUTATION"
    mutant = release.replace(*_MUTATION)
    (repo / "test_inflection.py").write_text(tests)
    gold_outcomes = _outcomes(repo)
    module.write_text(mutant)
    mutant_outcomes = _outcomes(repo)
    (repo / "test_inflection.py").unlink()
    git_in(repo, "init", "-q")
    git_in(repo, "add", "-A")
    git_in(repo, "commit", "-qm", "inflection 0.5.1 with a bug")
    ascii_ids = [i for i in gold_outcomes if i.isascii() and gold_outcomes[i] == "passed"]
    f2p = [i for i in ascii_ids if mutant_outcomes.get(i) == "failed"]
    p2p = [i for i in ascii_ids if mutant_outcomes.get(i) == "passed"]
    assert f2p and p2p, (f2p, p2p)
    return Task(
        instance_id="inflection-dasherize",
        repo="jpvanhal/inflection",
        problem_statement="inflection.dasherize('puni_puni') returns 'puni puni'; it should return 'puni-puni'.",
        patch=_patch(repo, "inflection/__init__.py", release),
        test_patch=_patch(repo, "test_inflection.py", tests),
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
        repo_path=str(repo),
    )
