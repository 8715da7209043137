"""Grading with hidden tests in a fresh local sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lego.errors import GradingError
from lego.sandboxes.evidence import judge, match_ids, parse_run
from lego.sandboxes.grading import grade
from lego.sandboxes.perturb import FilePlan, find_sites, plan_perturbations
from lego.types import Task
from tests.sandboxes.sbx_fixtures import LIB_FIXED, _patch


def test_gold_patch_resolves_and_base_does_not(calc_task: Task) -> None:
    gold = grade(calc_task, calc_task.patch)
    assert gold.reward == 1.0 and gold.resolved and set(gold.tests.values()) == {"passed"}
    assert gold.tampered == [] and gold.excluded_files == []
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


def test_a_task_naming_a_test_that_does_not_exist_cannot_be_graded(calc_task: Task) -> None:
    """The pristine repo does not collect it either: the task is broken (infrastructure), not the policy."""
    task = calc_task.model_copy(update={"PASS_TO_PASS": [*calc_task.PASS_TO_PASS, "tests/test_visible.py::test_gone"]})
    with pytest.raises(GradingError, match=r"cannot be graded.*not collected"):
        grade(task, task.patch)


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


def test_a_diff_that_breaks_the_hidden_test_files_place_is_the_policys_zero(calc_task: Task) -> None:
    """A file named like the hidden test directory used to make the test patch fail (an infrastructure
    error, masked in training); the test patch now goes onto the pristine repo first."""
    tests_as_file = "diff --git a/tests b/tests\nnew file mode 100644\n--- /dev/null\n+++ b/tests\n@@ -0,0 +1 @@\n+x\n"
    result = grade(calc_task, calc_task.patch + tests_as_file)
    assert result.reward == 1.0 and result.excluded_files == ["tests (new file that is not Python source)"]


def test_hidden_tests_that_do_not_match_the_task_are_the_tasks_fault(calc_task: Task) -> None:
    hidden = calc_task.test_patch.replace("def test_add_zero", "def test_add_zero_renamed")
    with pytest.raises(GradingError, match="cannot be graded"):
        grade(calc_task.model_copy(update={"test_patch": hidden}), calc_task.patch)


def test_a_diff_that_breaks_collection_is_the_policys_zero(calc_task: Task) -> None:
    """The same symptom as a broken task (the hidden tests do not collect), but the pristine repo runs
    them: the diff is to blame, reward 0, no infrastructure."""
    assert calc_task.repo_path
    broken_lib = LIB_FIXED + "raise ImportError('broken')\n"
    result = grade(calc_task, _patch(Path(calc_task.repo_path), "calc/__init__.py", broken_lib))
    assert result.reward == 0.0 and "collection errors" in result.log


def test_every_grade_perturbs_and_witnesses_each_expected_test(calc_task: Task) -> None:
    gold = grade(calc_task, calc_task.patch)
    assert (gold.perturbed, gold.witnessed) == (3, 3)
    assert "assert 5 ==" in gold.log or "assert 0 ==" in gold.log  # correct code fails the perturbed copy


T = "tests/t.py::test_a"
SRC = "def test_a():\n    assert f(2) == 4\n"


def _records(outcome: str, witnessed: str | None, ids: tuple[str, ...] = (T,), key: str = "") -> list[str]:
    recs = [{"k": "hello"}, {"k": "collected", "ids": list(ids)}, {"k": "start", "id": ids[0]}]
    if witnessed is not None:
        recs.append({"k": "witness", "site": key, "v": witnessed, "exact": True, "truth": True})
    recs += [
        {"k": "report", "id": ids[0], "when": w, "outcome": o}
        for w, o in (("setup", "passed"), ("call", outcome), ("teardown", "passed"))
    ]
    recs.append({"k": "finish", "exitstatus": 0 if outcome == "passed" else 1})
    return [json.dumps(r) for r in recs]


def _judge(clean: tuple[str, str | None], perturbed: tuple[str, str | None]):  # type: ignore[no-untyped-def]
    plan = FilePlan("tests/t.py", SRC, find_sites(SRC, "tests/t.py"))
    plan_perturbations([plan], {("tests/t.py", "test_a")}, 2)
    p_run = plan.perturbed[0][0]
    by_run = {p_run: perturbed, 1 - p_run: clean}
    runs = [parse_run(_records(by_run[r][0], by_run[r][1], key=plan.keys[0])) for r in (0, 1)]
    return judge([T], [plan], runs, [0 if by_run[r][0] == "passed" else 1 for r in (0, 1)])


def test_correct_code_fails_exactly_the_perturbed_assertion_with_the_true_value() -> None:
    ev = _judge(clean=("passed", "4"), perturbed=("failed", "4"))
    assert ev.tests == {T: "passed"} and not ev.tampered and not ev.failures and (ev.perturbed, ev.witnessed) == (1, 1)


@pytest.mark.parametrize(
    ("perturbed", "why"),
    [
        (("passed", "4"), "passed with the expected value"),  # forged stream / answer key / equals anything
        (("passed", None), "passed with the expected value"),
        (("failed", "5"), "not the true value"),  # a forger that guessed the failure but not the value
    ],
)
def test_a_perturbed_assertion_a_cheat_gets_wrong_is_tampering(perturbed: tuple[str, str | None], why: str) -> None:
    ev = _judge(clean=("passed", "4"), perturbed=perturbed)
    assert any(why in t for t in ev.tampered), ev.tampered


def test_a_forged_witness_in_a_passing_clean_run_is_tampering() -> None:
    ev = _judge(clean=("passed", "3"), perturbed=("failed", "4"))
    assert any("witnessed 3" in t for t in ev.tampered)


def test_wrong_code_is_the_policys_failure_not_tampering() -> None:
    ev = _judge(clean=("failed", "3"), perturbed=("failed", "3"))
    assert ev.tests == {T: "failed"} and not ev.tampered


def test_ids_as_swebench_writes_them_match_the_collected_node() -> None:
    collected = [
        "tests/t.py::test_a[a b]",
        "tests/t.py::test_b[x]",
        "tests/t.py::test_c[1 2]",
        "tests/t.py::test_c[1 3]",
    ]
    got = match_ids(["tests/t.py::test_a[a", "tests/t.py::test_b[x]", "tests/t.py::test_c[1"], collected)
    assert got == {"tests/t.py::test_a[a": "tests/t.py::test_a[a b]", "tests/t.py::test_b[x]": "tests/t.py::test_b[x]"}


def test_a_failed_subtest_fails_its_test_and_is_no_protocol_violation() -> None:
    recs = _records("passed", None)
    recs.insert(4, json.dumps({"k": "report", "id": T, "when": "call", "outcome": "failed", "sub": True}))
    run = parse_run(recs)
    assert run.outcome == {T: "failed"} and not run.malformed
