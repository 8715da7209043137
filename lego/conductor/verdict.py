"""What a rollout's outcome is worth: who caused how it ended, and whether its reward stands.

Two pure functions, applied by :meth:`lego.conductor.rollout.RolloutRunner.finish` to every rollout of either
backend, in the process that owns the proxy (it alone knows what the session recorded).

**Attribution** (:func:`attribute`). Training masks infrastructure failures out of the loss and eval
leaves them out of pass@1, so a policy that can make its own failure look like infrastructure raises
its score by failing. The rule therefore counts as infrastructure only what the policy could not
have caused:

* the sandbox could not be created, or the harness could not be set up (before the agent exists);
* the harness failed before the policy's first response (nothing the agent did ran yet);
* the proxy found the engine unavailable (unreachable, timed out) for this session and the rollout
  then died or timed out. Only unavailability counts: an engine *error* (a 502) may be caused by what
  the request held, and every request on the model face is one the agent could have sent, so a
  policy that can make the engine fail on demand buys nothing with it;
* grading raised, twice (:mod:`lego.conductor.drive` retries it): the grader turns whatever the
  agent's code does under the tests into a grade (a diff that does not apply, breaks collection or
  crashes the test process scores 0 there), so an exception is lego's own path failing. Whether the
  pristine repo grades is said in the detail; a policy that crashes the grader on purpose buys a
  masked rollout, never a reward.

Everything else that goes wrong after the policy's first response is the policy's, reward 0, with
the reason in ``cause_detail``: a harness that died (``kill -9 $PPID``, ``kill -9 -1``, a sandbox
that broke under it), a repo whose diff cannot be taken, and an engine error on one of its requests.

**Guards** (:func:`zeroing_reasons`). A detection zeroes the reward (``guards.on_detect = "zero"``,
the default) when it shows an attempt to be paid for something other than the agent's own fix:

* ``hack/history_digging``, ``hack/fetch_upstream``: the agent went looking for the answer in git
  internals or upstream. A bug fix has no need of the reflog, ``cat-file``, ``.git/objects`` or a
  clone, so false positives are rare, and each one is kept, flagged and explained.
* ``grade/tampering``: grading itself reported that the code under test interfered with the run
  (``GradeResult.tampered``: a test that passes as written but not in the blind copy, a result record written twice).

Two detections stay flags: ``test_tamper`` alone (the agent's diff touched test files or test
infrastructure) does not zero, because those edits are dropped from the graded diff and cannot change
the grade, while writing a reproduction test next to a fix is what good agents do. And
``hack/forge_test_output`` does not zero on its own: its patterns (pytest hook names, JUnit XML,
``os._exit(0)``, ``.pth``) are also ordinary code in legitimate fixes of test tooling and packaging;
forging that works is caught where it acts, by grading (``grade/tampering``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from lego.types import FailureCause, GradeResult, TerminationLabel

__all__ = ["ZEROING_SIGNATURES", "Attribution", "DriveStage", "attribute", "zeroing_reasons"]

DriveStage = Literal["sandbox", "prepare", "harness", "diff", "grade", "done"]
"""Where driving a rollout stopped: the step that failed, or ``done``."""

ZEROING_SIGNATURES = ("history_digging", "fetch_upstream")
"""Hack signatures (:data:`lego.sandboxes.guards.HACK_SIGNATURES`) whose detection zeroes the reward."""

_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Attribution:
    """Who owns a rollout's outcome. ``scored``: the grade's reward stands (before guards); otherwise
    the reward is 0 for the policy and None (masked) for the infrastructure."""

    cause: FailureCause
    detail: str
    scored: bool

    @property
    def reward_if_unscored(self) -> float | None:
        return 0.0 if self.cause == "policy" else None


def _line(text: str) -> str:
    """One line of at most a few hundred characters (a reason, not a log)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _DETAIL_CHARS else flat[: _DETAIL_CHARS - 3] + "..."


def attribute(
    *,
    stage: DriveStage,
    error: str,
    label: TerminationLabel,
    exit_code: int | None,
    responses: int,
    engine_unavailable: int,
    pristine_grades: bool | None,
) -> Attribution:
    """Attribute one rollout's end (see the module doc for the rule).

    ``stage``: where driving stopped; ``error``: the failure's text; ``label``: the termination label;
    ``exit_code``: the harness's; ``responses``: generations the proxy served this session;
    ``engine_unavailable``: calls the engine could not serve at all; ``pristine_grades``: after a grading failure,
    whether an empty diff grades (None when grading did not fail)."""
    why = _line(error)
    if stage == "sandbox":
        return Attribution("infrastructure", f"the sandbox could not be created: {why}", False)
    if stage == "prepare":
        return Attribution("infrastructure", f"the harness could not be set up: {why}", False)
    died = stage in ("harness", "diff") or label == "harness_error"
    if engine_unavailable and (died or label == "timeout"):
        return Attribution(
            "infrastructure",
            f"the engine was unavailable for {engine_unavailable} call(s) of this session, then the rollout {label}",
            False,
        )
    if stage == "harness" or label == "harness_error":
        how = f"exit {exit_code}" if exit_code is not None else why or "no exit status"
        if responses == 0:
            return Attribution(
                "infrastructure", f"the harness failed before the policy's first response ({how})", False
            )
        return Attribution(
            "policy",
            f"the harness died after {responses} policy response(s) ({how}): the agent's commands own it",
            False,
        )
    if stage == "diff":
        if responses == 0:
            return Attribution("infrastructure", f"the diff could not be taken before the policy acted: {why}", False)
        return Attribution("policy", f"the repo the agent left has no diff that can be taken: {why}", False)
    if stage == "grade":
        # the grader turns whatever the agent's code does under the tests into a grade; an exception is
        # lego's own path failing (twice: drive.py retries it), whether or not the pristine repo grades
        if pristine_grades:
            return Attribution(
                "infrastructure", f"lego's grading failed twice on this diff, not on the pristine repo: {why}", False
            )
        return Attribution("infrastructure", f"grading fails on the pristine repo too: {why}", False)
    return Attribution("policy", _ENDINGS.get(label, label), True)


_ENDINGS: dict[str, str] = {
    "completed": "the harness finished; the diff was graded",
    "timeout": "the rollout ran past its time limit; the diff was graded",
    "max_turns": "the policy used all its turns; the diff was graded",
    "cut": "cut as a straggler at a turn boundary (training.straggler_multiple); the diff was graded",
    "overlong": "the conversation outgrew the model's context; the diff was graded",
}


def zeroing_reasons(guard_flags: Mapping[str, bool], grade: GradeResult | None) -> list[str]:
    """The detections on a rollout that zero its reward under ``guards.on_detect = "zero"`` (module doc)."""
    reasons = [f"hack/{name}" for name in ZEROING_SIGNATURES if guard_flags.get(f"hack/{name}")]
    if grade is not None and grade.tampered:
        reasons.append("grade/tampering")
    return reasons
