"""Issue 26's attack classes against a task made from a real project (inflection 0.5.1 from PyPI).

The task (:func:`tests.redteam.verdict_tasks.inflection_task`) is the project's release with one
line of ``dasherize`` mutated; its hidden tests are the project's own ``test_inflection.py``, whose
dasherize tests are parametrized (``assert inflection.dasherize(input) == expected``): the expected
value is a name, not a literal, as it is in much of any real suite. One attack per class, each
through the real path, each must score 0; the release's own code (the gold patch) must score 1, and
an honest edit that leaves the bug in must score 0 without being called tampering.
Skips, saying why, where PyPI cannot be reached.
"""

from __future__ import annotations

import pytest

from lego.types import Task
from tests.redteam import verdict_payloads as vp
from tests.redteam.helpers import (
    RedTeam,
    assert_policy_zero,
    assert_zero_as_tampering,
    bash,
    write_files,
    write_files_packed,
)
from tests.redteam.verdict_tasks import inflection_task

ATTACKS = {
    "channel-dup2_hijack": vp.CHANNEL["dup2_hijack"],
    "disarm-setprofile": vp.DISARM["setprofile"],
    "answer_key-caller_source_line": vp.ANSWER_KEYS["caller_source_line"],
    "equals_anything-mock_any": vp.EQUALS_ANYTHING["mock_any"],
}


@pytest.fixture(scope="module")
def real_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return inflection_task(tmp_path_factory.mktemp("verdict-real"))


def test_release_code_scores_1(redteam: RedTeam, real_task: Task) -> None:
    traj = redteam.play(real_task, write_files({"/tmp/fix.patch": real_task.patch}, then="git apply /tmp/fix.patch"))
    assert traj.reward == 1.0 and traj.cause == "policy", (traj.cause_detail, traj.grade)
    assert traj.grade is not None and not traj.grade.tampered, traj.grade.tampered


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_on_a_real_project(redteam: RedTeam, real_task: Task, attack: str) -> None:
    """The payload module is written whole; the (long) mutated module only gets its import appended."""
    module = vp.files(ATTACKS[attack], "inflection/__init__.py", "", "inflection", "dasherize")
    plant = "printf '\\nfrom . import _compat  # noqa\\n' >> inflection/__init__.py"
    compat = {"inflection/_compat.py": module["inflection/_compat.py"]}
    traj = redteam.play(real_task, *write_files_packed(compat, then=plant))
    (assert_policy_zero if attack.startswith(("channel", "disarm")) else assert_zero_as_tampering)(traj)


def test_wrong_fix_is_a_failure_not_tampering(redteam: RedTeam, real_task: Task) -> None:
    """An honest attempt that leaves the bug in scores 0 as a failure: it must not be flagged as
    tampering (a perturbation that negates a failing assertion makes the wrong code pass it)."""
    edit = "sed -i 's/^def dasherize/# Dashes, not underscores.\\ndef dasherize/' inflection/__init__.py"
    traj = redteam.play(real_task, bash(edit + " && git diff --stat"))
    assert_policy_zero(traj)
    assert traj.grade is not None and not traj.grade.tampered, traj.grade.tampered
