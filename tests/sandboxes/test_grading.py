"""Grading with hidden tests in a fresh local sandbox."""

from __future__ import annotations

import json

import pytest

from lego.errors import GradingError
from lego.sandboxes.grading import grade, verdict
from lego.types import Task


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


def test_a_diff_that_breaks_the_hidden_test_files_place_is_the_policys_zero(calc_task: Task) -> None:
    """A file named like the hidden test directory used to make the test patch fail (an infrastructure
    error, masked in training); the test patch now goes onto the pristine repo first."""
    tests_as_file = "diff --git a/tests b/tests\nnew file mode 100644\n--- /dev/null\n+++ b/tests\n@@ -0,0 +1 @@\n+x\n"
    result = grade(calc_task, calc_task.patch + tests_as_file)
    assert result.reward == 1.0 and result.excluded_files == ["tests (new file that is not Python source)"]


def test_collecting_other_tests_than_expected_is_reward_0(calc_task: Task) -> None:
    hidden = calc_task.test_patch.replace("def test_add_zero", "def test_add_zero_renamed")
    result = grade(calc_task.model_copy(update={"test_patch": hidden}), calc_task.patch)
    assert result.reward == 0.0 and "collected tests differ from the expected set" in result.log
    assert result.tests["tests/test_hidden.py::test_add_zero"] == "missing"


HELLO, FINISH = '{"k": "hello"}', '{"k": "finish", "exitstatus": 0}'
T = "t.py::test_a"


def _stream(*whens: tuple[str, str], ids: tuple[str, ...] = (T,)) -> list[str]:
    collected = json.dumps({"k": "collected", "ids": list(ids)})
    reports = [json.dumps({"k": "report", "id": T, "when": w, "outcome": o}) for w, o in whens]
    return [HELLO, collected, *reports, FINISH]


OK = (("setup", "passed"), ("call", "passed"), ("teardown", "passed"))


def test_verdict_accepts_pytests_protocol() -> None:
    v = verdict(_stream(*OK), [T], {}, 0)
    assert v.tests == {T: "passed"} and v.tampered == [] and v.failures == []


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        (_stream(("call", "passed"), ("teardown", "passed")), "tampered"),
        (_stream(("setup", "passed"), ("teardown", "passed")), "tampered"),
        (_stream(*OK, ("call", "passed")), "tampered"),
        ([*_stream(*OK), FINISH], "tampered"),
        ([*_stream(*OK)[:-1], "not json"], "tampered"),
        (_stream(*OK)[:-1], "failures"),
        (_stream(*OK, ids=("t.py::test_b", T)), "tampered"),
        (_stream(*OK)[1:], "failures"),
        ([HELLO, '{"k": "audit", "event": "sys.addaudithook", "certain": true}', *_stream(*OK)[1:]], "tampered"),
    ],
    ids=[
        "no-setup",
        "no-call",
        "call-after-teardown",
        "second-finish",
        "garbage",
        "no-finish",
        "order",
        "no-hello",
        "audit",
    ],
)
def test_verdict_fails_closed(records: list[str], problem: str) -> None:
    v = verdict(records, [T], {}, 0)
    assert getattr(v, problem), (v.tampered, v.failures)
    assert v.tampered or v.failures


def test_verdict_catches_a_canary_reported_passed_or_failing_without_its_token() -> None:
    canary = "t.py::test_a_1f2e3d"
    ids = (T, canary)

    def run(outcome: str, msg: str) -> list[str]:
        recs = [HELLO, json.dumps({"k": "collected", "ids": list(ids)})]
        for test, out in ((T, "passed"), (canary, outcome)):
            recs += [json.dumps({"k": "report", "id": test, "when": "setup", "outcome": "passed"})]
            recs += [json.dumps({"k": "report", "id": test, "when": "call", "outcome": out, "msg": msg})]
            recs += [json.dumps({"k": "report", "id": test, "when": "teardown", "outcome": "passed"})]
        return [*recs, '{"k": "finish", "exitstatus": 1}']

    assert verdict(run("failed", "AssertionError: tok123"), [T], {canary: "tok123"}, 1).tampered == []
    assert "reported passed" in verdict(run("passed", ""), [T], {canary: "tok123"}, 1).tampered[0]
    assert "without its token" in verdict(run("failed", "forged"), [T], {canary: "tok123"}, 1).tampered[0]
