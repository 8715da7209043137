"""Grading with hidden tests in a fresh local sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lego.errors import GradingError
from lego.sandboxes.blind import blind_copy
from lego.sandboxes.evidence import judge, match_ids, parse_run, reference
from lego.sandboxes.grading import grade
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


def test_every_grade_judges_each_fail_to_pass_test_on_its_behaviour(calc_task: Task) -> None:
    gold = grade(calc_task, calc_task.patch)
    assert (gold.behavioural, gold.bit_only, gold.unstable) == (1, 0, 0), gold.log[-2000:]
    assert "1 FAIL_TO_PASS test(s) judged on behaviour" in gold.log


T = "tests/t.py::test_a"
SRC = "def test_a():\n    assert f(2) == 4\n"
PLAN = blind_copy({"tests/t.py": SRC})
B = PLAN.blind_node(T)  # tests/t.py::test_l1


def _records(test: str, outcome: str, witness: list | None = None, key: str = "0_1.0") -> list[str]:  # type: ignore[type-arg]
    recs: list[dict] = [{"k": "hello"}, {"k": "collected", "ids": [test]}, {"k": "start", "id": test}]  # type: ignore[type-arg]
    if witness is not None:
        recs.append({"k": "witness", "site": key, "r": witness})
    recs += [
        {"k": "report", "id": test, "when": w, "outcome": o}
        for w, o in (("setup", "passed"), ("call", outcome), ("teardown", "passed"))
    ]
    recs.append({"k": "finish", "exitstatus": 0 if outcome == "passed" else 1})
    return [json.dumps(r) for r in recs]


GOLD = reference(parse_run(_records(T, "passed")), [parse_run(_records(B, "passed", ["i", "4"]))] * 2)


def _judge(real: str, blind: list | None, extra: list[str] | None = None):  # type: ignore[no-untyped-def,type-arg]
    real_run = parse_run(_records(T, real) + (extra or []))
    blind_run = parse_run(_records(B, "passed", blind))
    return judge([T], PLAN, real_run, blind_run, GOLD, [0, 0])


def test_the_blind_copy_holds_no_expected_value_and_the_host_judges_the_witness() -> None:
    assert "4" not in PLAN.texts["tests/t.py"] and "test_a" not in PLAN.texts["tests/t.py"]
    ev = _judge("passed", ["i", "4"])
    assert ev.tests == {T: "passed"} and not ev.tampered and not ev.failures and ev.behavioural == [T]


@pytest.mark.parametrize(
    "witness",
    [
        ["i", "5"],  # an answer key read from the test as written: wrong where it is hidden
        ["obj", "calc.Same", []],  # a value that equals anything
        ["sub", "calc.Same", ["i", "-1"], []],  # an int subclass whose __eq__ says yes, holding a - b
        None,  # the witness never recorded
    ],
)
def test_a_pass_as_written_that_the_blind_copy_contradicts_is_tampering(witness: list | None) -> None:  # type: ignore[type-arg]
    ev = _judge("passed", witness)
    assert any("expected outcome is hidden" in t for t in ev.tampered), ev.tampered


def test_a_second_record_of_one_phase_is_tampering() -> None:
    late = json.dumps({"k": "report", "id": T, "when": "call", "outcome": "passed"})
    ev = _judge("failed", ["i", "3"], extra=[late])
    assert any("written twice" in t for t in ev.tampered), ev.tampered


def test_wrong_code_is_the_policys_failure_not_tampering() -> None:
    ev = _judge("failed", ["i", "3"])
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
    recs = _records(T, "passed")
    recs.insert(4, json.dumps({"k": "report", "id": T, "when": "call", "outcome": "failed", "sub": True}))
    run = parse_run(recs)
    assert run.outcome == {T: "failed"} and not run.malformed
