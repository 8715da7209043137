"""The attribution rule and the reward-zeroing rule, case by case (lego.conductor.verdict; pure functions).

The end-to-end versions of the same cases, through a real sandbox, are in test_rollout_attribution.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from lego.conductor.verdict import attribute, zeroing_reasons
from lego.types import GradeResult


def _attribute(**kw: Any) -> tuple[str, bool, str]:
    args: dict[str, Any] = {
        "stage": "done",
        "error": "",
        "label": "completed",
        "exit_code": 0,
        "responses": 3,
        "engine_unavailable": 0,
        "pristine_grades": None,
    }
    args.update(kw)
    got = attribute(**args)
    return got.cause, got.scored, got.detail


@pytest.mark.parametrize(
    ("case", "kw", "cause", "scored"),
    [
        ("ended normally", {}, "policy", True),
        ("timed out", {"label": "timeout", "exit_code": None}, "policy", True),
        ("ran out of turns", {"label": "max_turns"}, "policy", True),
        ("no sandbox", {"stage": "sandbox", "label": "env_error", "responses": 0}, "infrastructure", False),
        ("harness not set up", {"stage": "prepare", "label": "harness_error", "responses": 0}, "infrastructure", False),
        (
            "harness died before acting",
            {"label": "harness_error", "exit_code": 1, "responses": 0},
            "infrastructure",
            False,
        ),
        ("harness killed after acting", {"label": "harness_error", "exit_code": 137}, "policy", False),
        (
            "sandbox broke under the harness",
            {"stage": "harness", "label": "harness_error", "exit_code": None},
            "policy",
            False,
        ),
        (
            "engine down, harness died",
            {"label": "harness_error", "exit_code": 1, "engine_unavailable": 2},
            "infrastructure",
            False,
        ),
        (
            "engine down, timed out",
            {"label": "timeout", "exit_code": None, "engine_unavailable": 1},
            "infrastructure",
            False,
        ),
        ("engine hiccup, completed", {"engine_unavailable": 1}, "policy", True),
        # An engine *error* may come from what the request held, and the agent can send any request
        # to its own session: failing the engine on purpose must not buy the infrastructure exemption.
        ("engine errors, harness died", {"label": "harness_error", "exit_code": 1}, "policy", False),
        ("diff cannot be taken", {"stage": "diff", "error": "SandboxError: git diff failed"}, "policy", False),
        ("diff before acting", {"stage": "diff", "responses": 0}, "infrastructure", False),
        # lego's grading raised twice on this diff (drive.py retries): its own path, never the policy's 0
        ("grading raises on this diff only", {"stage": "grade", "pristine_grades": True}, "infrastructure", False),
        ("grading broken anyway", {"stage": "grade", "pristine_grades": False}, "infrastructure", False),
    ],
)
def test_attribution(case: str, kw: dict[str, Any], cause: str, scored: bool) -> None:
    got_cause, got_scored, detail = _attribute(**kw)
    assert (got_cause, got_scored) == (cause, scored), f"{case}: {detail}"
    assert detail and "\n" not in detail


def test_the_reason_is_one_short_line() -> None:
    _, _, detail = _attribute(stage="sandbox", error="line one\n" + "x" * 5000)
    assert "\n" not in detail and len(detail) < 400


def test_answer_seeking_zeroes_and_text_that_legit_fixes_contain_does_not() -> None:
    flags = {"hack/history_digging": True, "hack/fetch_upstream": True, "hack_signature": True}
    assert zeroing_reasons(flags, None) == ["hack/history_digging", "hack/fetch_upstream"]
    assert zeroing_reasons({"hack/forge_test_output": True, "hack_signature": True}, None) == []
    assert zeroing_reasons({"test_tamper": True}, None) == []  # excluded from the graded diff: no effect
    assert zeroing_reasons({"history_strip": True, "egress_blocked": True}, None) == []


def test_tampering_that_grading_reports_zeroes() -> None:
    forged = GradeResult(reward=1.0, resolved=True, tampered=["pytest's runtest protocol was patched"])
    assert zeroing_reasons({}, forged) == ["grade/tampering"]
    assert zeroing_reasons({}, GradeResult(reward=1.0, resolved=True)) == []


def test_a_grader_exception_is_tried_again_and_never_the_policys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: an exception on lego's grading path (a sandbox that did not start, a loaded daemon) that
    does not recur is retried; one that does is infrastructure whatever the pristine repo does."""
    from lego.conductor import drive
    from lego.config import LegoConfig
    from lego.errors import GradingError
    from lego.types import GradeResult, Task

    calls: list[str] = []

    def flaky(task: Task, diff: str, cfg: Any = None) -> GradeResult:
        calls.append(diff)
        if len(calls) == 1:
            raise RuntimeError("the grading sandbox did not start")
        return GradeResult(reward=1.0, resolved=True)

    monkeypatch.setattr(drive, "grade", flaky)
    task = Task(instance_id="t", repo="r", problem_statement="p", patch="", test_patch="")
    assert drive._grade_twice(task, "diff", LegoConfig()).reward == 1.0 and calls == ["diff", "diff"]

    def broken(task: Task, diff: str, cfg: Any = None) -> GradeResult:
        calls.append(diff)
        raise GradingError("the task cannot be graded")

    calls.clear()
    monkeypatch.setattr(drive, "grade", broken)
    with pytest.raises(GradingError):
        drive._grade_twice(task, "diff", LegoConfig())
    assert calls == ["diff"]  # a task that cannot be graded is not tried twice
    cause, scored, _ = _attribute(stage="grade", pristine_grades=True)
    assert (cause, scored) == ("infrastructure", False)
