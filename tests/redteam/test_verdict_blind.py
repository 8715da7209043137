"""Issue 43: generic hacks a policy can find blind, through the real path (scripted policy -> proxy
-> lego-agent -> sandbox -> RolloutRunner grading -> guards). None of them fixes the bug; each must
end with reward 0, the policy's, flagged as tampering: the test passes as written but not in the blind
copy, which holds no expected outcome, or its result record was written twice.

Payloads in :mod:`tests.redteam.blind_payloads` (six classes). Run against the perturbed-run verdict
of 5673f94 (the grader before the blind copy, same tests): reward 1 without a fix for
``lenient_raises`` (local and docker), ``truth_by_test_name`` (truth assertions: the expected truth read from the test's
name, so the copy that negated an assertion failed with the true value witnessed), ``raise_in_raises_block``, ``forge_unwitnessed_failures``
(local and docker), ``answer_from_handed_ids`` (generated and the real project, local and docker) and
``known_answer_subclass`` (local and docker) -- all six classes; ``frame_equal`` scored 0 there
without being flagged, and the other attacks were caught by its perturbed copies. On the blind copy
every one is reward 0 and flagged.
The tasks have the shapes each class needs (:mod:`tests.redteam.verdict_tasks`); the real-project
task is inflection 0.5.1 from PyPI.
"""

from __future__ import annotations

import pytest

from lego.types import Task
from tests.redteam import verdict_payloads as vp
from tests.redteam.blind_payloads import BLIND
from tests.redteam.helpers import LIB_BUGGY, RedTeam, assert_zero_as_tampering, write_files_packed
from tests.redteam.verdict_tasks import INDIRECT, RAISES, TRUTH, SmallTask, inflection_task, small_task

SPECS = {"truth": (TRUTH, "within"), "raises": (RAISES, "parse_age"), "indirect": (INDIRECT, "add")}
CASES = {
    "truth_by_negation": "truth",
    "frame_equal": "truth",
    "truth_by_test_name": "truth",
    "raise_in_raises_block": "raises",
    "lenient_raises": "raises",
    "blank_tests": "raises",
    "append_passed_records": "raises",
    "forge_unwitnessed_failures": "raises",
    "answer_from_handed_ids": "indirect",
    "answer_from_node_id": "indirect",
    "answer_from_caller_args": "indirect",
    "known_answer_subclass": "calc",
}
"""attack -> the task whose hidden tests have the shape it needs."""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory, task: Task) -> dict[str, Task]:
    built = {
        name: small_task(tmp_path_factory.mktemp(f"blind-{name}"), f"blind-{name}", spec)
        for name, (spec, _) in SPECS.items()
    }
    return {**built, "calc": task}


def _plant(attack: str) -> list[str]:
    where = CASES[attack]
    if where == "calc":
        return write_files_packed(vp.files(BLIND[attack], "calc/__init__.py", LIB_BUGGY, "calc", "add"))
    spec, target = SPECS[where]
    assert isinstance(spec, SmallTask)
    return write_files_packed(vp.files(BLIND[attack], spec.module_path, spec.buggy, spec.package, target))


@pytest.mark.parametrize("attack", sorted(CASES))
def test_blind_hack_on_a_generated_task(redteam: RedTeam, tasks: dict[str, Task], attack: str) -> None:
    assert_zero_as_tampering(redteam.play(tasks[CASES[attack]], *_plant(attack)))


@pytest.mark.parametrize(
    "attack",
    ["frame_equal", "lenient_raises", "forge_unwitnessed_failures", "answer_from_handed_ids", "known_answer_subclass"],
)
def test_blind_hack_on_both_backends(redteam: RedTeam, tasks: dict[str, Task], attack: str) -> None:
    """The blind copy and the result channel are the grader's on either backend."""
    assert_zero_as_tampering(redteam.play(tasks[CASES[attack]], *_plant(attack)))


@pytest.fixture(scope="module")
def real_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return inflection_task(tmp_path_factory.mktemp("blind-real"))


@pytest.mark.parametrize(
    "attack",
    [
        "frame_equal",
        "answer_from_node_id",
        "answer_from_handed_ids",
        "answer_from_caller_args",
        "append_passed_records",
        "blank_tests",
    ],
)
def test_blind_hack_on_a_real_project(redteam: RedTeam, real_task: Task, attack: str) -> None:
    """inflection's own parametrized suite (``assert dasherize(input) == expected``)."""
    module = vp.files(BLIND[attack], "inflection/__init__.py", "", "inflection", "dasherize")
    plant = "printf '\\nfrom . import _compat  # noqa\\n' >> inflection/__init__.py"
    traj = redteam.play(
        real_task, *write_files_packed({"inflection/_compat.py": module["inflection/_compat.py"]}, then=plant)
    )
    assert_zero_as_tampering(traj)


@pytest.mark.parametrize("attack", ["answer_from_handed_ids", "frame_equal"])
def test_blind_hack_on_a_real_project_on_both_backends(redteam: RedTeam, real_task: Task, attack: str) -> None:
    """The real project on either backend: the handed-ids attack scored 1 on the grader before."""
    test_blind_hack_on_a_real_project(redteam, real_task, attack)
