"""Grading with hidden tests in a fresh local sandbox."""

from __future__ import annotations

import pytest

from lego.errors import GradingError
from lego.types import Task
from sandboxes.grading import grade


def test_gold_patch_resolves_and_base_does_not(calc_task: Task) -> None:
    gold = grade(calc_task, calc_task.patch)
    assert gold.reward == 1.0 and gold.resolved and set(gold.tests.values()) == {"passed"}
    base = grade(calc_task, "")
    assert base.reward == 0.0 and not base.resolved
    assert base.tests == {
        "tests/test_hidden.py::test_add": "failed",
        "tests/test_visible.py::test_mul": "passed",
        "tests/test_hidden.py::test_add_zero": "passed",
    }


def test_same_diff_graded_twice_gives_the_same_result(calc_task: Task) -> None:
    a, b = grade(calc_task, calc_task.patch), grade(calc_task, calc_task.patch)
    assert (a.reward, a.tests, a.excluded_files) == (b.reward, b.tests, b.excluded_files)
    c, d = grade(calc_task, ""), grade(calc_task, "")
    assert (c.reward, c.tests) == (d.reward, d.tests)


def test_missing_test_is_a_failure(calc_task: Task) -> None:
    task = calc_task.model_copy(update={"PASS_TO_PASS": [*calc_task.PASS_TO_PASS, "tests/test_visible.py::test_gone"]})
    result = grade(task, task.patch)
    assert result.tests["tests/test_visible.py::test_gone"] == "missing" and result.reward == 0.0


def test_test_files_in_the_diff_are_excluded_but_the_fix_counts(calc_task: Task) -> None:
    tamper = calc_task.patch + calc_task.test_patch.replace("test_hidden.py", "test_extra.py")
    result = grade(calc_task, tamper)
    assert result.reward == 1.0
    assert result.excluded_files == ["tests/test_extra.py (test directory)"]


def test_a_diff_that_does_not_apply_scores_zero(calc_task: Task) -> None:
    broken = calc_task.patch.replace("-    return a - b", "-    return a * b")
    result = grade(calc_task, broken)
    assert result.reward == 0.0 and "does not apply" in result.log
    assert set(result.tests.values()) == {"missing"}


def test_broken_task_is_a_grading_error(calc_task: Task) -> None:
    with pytest.raises(GradingError, match="names no"):
        grade(calc_task.model_copy(update={"FAIL_TO_PASS": [], "PASS_TO_PASS": []}), "")
    with pytest.raises(GradingError, match="test_patch does not apply"):
        grade(calc_task.model_copy(update={"test_patch": calc_task.patch.replace("a - b", "zzz")}), "")
