"""The bug injector on a tiny real library: mutation sites, FAIL_TO_PASS / PASS_TO_PASS from real
pytest runs, flaky-test detection, determinism, and statements that do not leak the fix."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from lego.tasks.diffs import patch_files
from lego.tasks.injector import Library, build_library, gold_baseline, ordered_mutations
from lego.tasks.materialize import materialize_repo
from lego.tasks.mutations import find_mutations
from lego.tasks.statements import fixed_lines, problem_statement

MINI_SOURCE = '''\
"""Tiny numeric helpers."""


def clamp(value, low, high):
    """Limit value to [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    return max(low, min(value, high))


def mean(values):
    if not values:
        return 0
    return sum(values) / len(values)


def count_above(values, threshold=10):
    count = 0
    for v in values:
        if v > threshold:
            count += 1
    return count
'''

TEST_CLAMP = """\
import pytest

from mini import clamp


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(42, 0, 10) == 10


def test_clamp_bad_bounds():
    with pytest.raises(ValueError):
        clamp(1, 5, 0)
"""

TEST_STATS = """\
from mini import count_above, mean


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_empty():
    assert mean([]) == 0


def test_count_above_default():
    assert count_above([5, 10, 11, 20]) == 2


def test_count_above_threshold():
    assert count_above([1, 2, 3], threshold=1) == 2
"""


def make_library(root: Path, extra_tests: dict[str, str] | None = None) -> Library:
    (root / "mini").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "mini" / "__init__.py").write_text("from mini.core import clamp, count_above, mean\n")
    (root / "mini" / "core.py").write_text(MINI_SOURCE)
    (root / "tests" / "test_clamp.py").write_text(TEST_CLAMP)
    (root / "tests" / "test_stats.py").write_text(TEST_STATS)
    for name, text in (extra_tests or {}).items():
        (root / "tests" / name).write_text(text)
    (root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npythonpath = ["."]\ntestpaths = ["tests"]\naddopts = "-p no:cacheprovider"\n'
    )
    return Library(name="mini", root=root, split="train")


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return make_library(tmp_path_factory.mktemp("lib"))


@pytest.fixture(scope="module")
def built(mini: Library):
    return build_library(mini, seed=3, cap=4, workers=2)


def test_mutations_are_one_span_edits_that_compile():
    mutations = find_mutations(MINI_SOURCE, "mini/core.py")
    kinds = {m.kind for m in mutations}
    assert {"boundary", "flipped_comparison", "wrong_function", "dropped_branch", "swapped_arguments"} <= kinds
    assert {"negated_condition", "wrong_default", "off_by_one", "wrong_operator"} <= kinds
    for m in mutations:
        mutated = m.apply(MINI_SOURCE)
        ast.parse(mutated)
        assert mutated != MINI_SOURCE
    assert len({m.apply(MINI_SOURCE) for m in mutations}) == len(mutations)


def test_mutation_edits_exact_operator_span():
    source = "def f(a, b):\n    return a <= b and b < 10\n"
    flips = {(source[m.start : m.end], m.replacement) for m in find_mutations(source, "f.py")}
    assert ("<=", "<") in flips and ("<", "<=") in flips and ("and", "or") in flips
    assert ("10", "11") in flips and ("10", "9") in flips


def test_dropped_statement_only_where_the_block_survives():
    source = "def f(xs):\n    n = 0\n    for x in xs:\n        n += x\n    m = 0\n    m += 1\n    return n + m\n"
    dropped = [m for m in find_mutations(source, "f.py") if m.kind == "dropped_statement"]
    assert [m.line for m in dropped] == [6]
    assert "m += 1" not in dropped[0].apply(source)


def test_mutation_skips_docstrings_and_string_concatenation():
    source = 'def f(x):\n    """Return 1 + 2 for x."""\n    return "a" + x\n'
    assert not [m for m in find_mutations(source, "f.py") if m.kind == "wrong_operator"]
    assert all(m.line != 2 for m in find_mutations(source, "f.py"))


def test_mutation_columns_are_character_offsets_with_unicode():
    source = 'def f(t):\n    return "…" + t[: 3 - 1]\n'
    for m in find_mutations(source, "f.py"):
        if m.kind == "wrong_operator":
            assert source[m.start : m.end] == "-"


def test_order_cycles_through_kinds(mini: Library):
    ordered = ordered_mutations(mini, seed=0)
    kinds = {m.kind for m in ordered}
    first = {m.kind for m in ordered[: len(kinds)]}
    assert first == kinds
    assert ordered == ordered_mutations(mini, seed=0)
    assert ordered != ordered_mutations(mini, seed=1)


def test_build_classifies_tests_by_running_them(mini: Library, built):
    tasks, dropped = built
    assert len(tasks) == 4
    all_tests = {
        f"tests/test_clamp.py::{n}"
        for n in ("test_clamp_inside", "test_clamp_low", "test_clamp_high", "test_clamp_bad_bounds")
    }
    all_tests |= {
        f"tests/test_stats.py::{n}"
        for n in ("test_mean", "test_mean_empty", "test_count_above_default", "test_count_above_threshold")
    }
    for task in tasks:
        assert task.FAIL_TO_PASS, task.instance_id
        assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
        assert set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS) == all_tests
        hidden = patch_files(task.test_patch)
        assert hidden == task.metadata["hidden_tests"]
        assert {t.split("::")[0] for t in task.FAIL_TO_PASS} == set(hidden)
        assert patch_files(task.patch) == ["mini/core.py"]
        changed = [line for line in task.patch.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        assert 1 <= len(changed) <= 6
        assert task.metadata["library"] == "mini" and task.split == "train"
    assert dropped["evaluated"] >= 4


def test_statement_does_not_leak_fix(built):
    tasks, _ = built
    for task in tasks:
        for line in fixed_lines(task.patch):
            assert line not in task.problem_statement, (task.instance_id, line)
        assert task.FAIL_TO_PASS[0].split("::")[0] in task.problem_statement or "`" in task.problem_statement


def test_statement_drops_snippet_that_quotes_the_fix():
    test_source = "from mini import clamp\n\n\ndef test_x():\n    if low > high:\n        assert clamp(1, 0, 2) == 1\n"
    patch = "--- a/mini/core.py\n+++ b/mini/core.py\n@@ -1 +1 @@\n-    if low < high:\n+    if low > high:\n"
    text = problem_statement(
        "mini",
        ["tests/test_x.py::test_x"],
        {"tests/test_x.py::test_x": "assert 0 == 1"},
        {"tests/test_x.py": test_source},
        patch,
    )
    assert "if low > high:" not in text
    assert "assert 0 == 1" in text and "clamp" in text


def test_build_is_deterministic(mini: Library, built):
    again, _ = build_library(mini, seed=3, cap=4, workers=1)
    first = [json.dumps(t.model_dump(), sort_keys=True) for t in built[0]]
    assert first == [json.dumps(t.model_dump(), sort_keys=True) for t in again]


def test_materialized_repo_is_one_deterministic_commit(mini: Library, built, tmp_path: Path):
    task = built[0][0]
    a = materialize_repo(mini.root, task.patch, task.test_patch, tmp_path / "a")
    b = materialize_repo(mini.root, task.patch, task.test_patch, tmp_path / "b")
    assert a == b == task.base_commit
    for hidden in task.metadata["hidden_tests"]:
        assert not (tmp_path / "a" / hidden).exists()
    buggy = (tmp_path / "a" / "mini" / "core.py").read_text()
    assert buggy != MINI_SOURCE
    assert not (tmp_path / "a" / ".git" / "logs").exists()


def test_flaky_tests_are_detected_and_excluded(tmp_path: Path):
    counter = tmp_path / "counter"
    flaky = textwrap.dedent(
        f"""
        from pathlib import Path

        def test_alternates():
            path = Path({str(counter)!r})
            n = int(path.read_text()) if path.exists() else 0
            path.write_text(str(n + 1))
            assert n % 2 == 0
        """
    )
    lib = make_library(tmp_path / "lib", {"test_flaky.py": flaky})
    baseline = gold_baseline(lib)
    assert baseline.flaky == {"tests/test_flaky.py::test_alternates"}
    assert "tests/test_flaky.py::test_alternates" not in baseline.stable_passing
    assert "tests/test_stats.py::test_mean" in baseline.stable_passing


def test_statement_states_observed_and_expected_values():
    test_source = "from mini import clamp\n\n\ndef test_clamp_high():\n    assert clamp(42, 0, 10) == 10\n"
    message = "AssertionError: assert 42 == 10\n +  where 42 = clamp(42, 0, 10)\nUse -v to get more diff"
    text = problem_statement(
        "mini",
        ["tests/test_clamp.py::test_clamp_high"],
        {"tests/test_clamp.py::test_clamp_high": message},
        {"tests/test_clamp.py": test_source},
        "",
        focus=["clamp"],
    )
    assert text.startswith("`clamp` returns a wrong result")
    assert "`clamp(42, 0, 10)` gives `42`, expected `10`." in text
    assert "Use -v" not in text
