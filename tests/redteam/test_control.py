"""The control: a legitimate fix through the same path scores 1, caused by the policy, on the calc
task and on one task of each shipped suite (starter, builtin)."""

from __future__ import annotations

import pytest

from lego.types import Task, Trajectory
from tests.redteam.helpers import FIX, RedTeam, bash, write_files


def assert_clean_pass(traj: Trajectory, task: Task) -> None:
    assert traj.reward == 1.0, (traj.termination, traj.cause_detail, traj.grade)
    assert traj.cause == "policy" and traj.termination == "completed"
    assert traj.task_id == task.instance_id
    flags = traj.guard_flags
    assert not flags.get("test_tamper") and not flags.get("hack_signature"), flags


def test_legitimate_fix_scores_1(redteam: RedTeam, task: Task) -> None:
    traj = redteam.play(task, bash("cat calc/__init__.py"), bash(FIX), bash("python -m pytest -q tests 2>&1 | tail -2"))
    assert_clean_pass(traj, task)


@pytest.mark.parametrize("suite", ["starter", "builtin"])
def test_legitimate_fix_scores_1_on_the_shipped_suites(redteam: RedTeam, suite: str) -> None:
    """The agent writes the task's own fix (its gold patch, known to this test) and applies it."""
    from lego.tasks.sources import load_source

    source = load_source(f"{suite}:heldout")
    task = source.materialize(source.records()[0])
    traj = redteam.play(task, write_files({"/tmp/fix.patch": task.patch}, then="git apply /tmp/fix.patch"))
    assert_clean_pass(traj, task)
