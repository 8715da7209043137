"""Impossible canary tasks (lego.tasks.canary): the hidden tests turned against the task's own bug
report, so no fix passes them; graded by the real grader in real sandboxes."""

from __future__ import annotations

from pathlib import Path

from lego.sandboxes.grading import grade
from lego.tasks.canary import is_canary, make_canary, pick_canaries
from lego.types import Task
from tests.sandboxes.sbx_fixtures import make_task


def test_a_canary_contradicts_one_fail_to_pass_assertion(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    canary = make_canary(task)
    assert canary is not None and is_canary(canary.instance_id)
    assert canary.patch == "" and canary.metadata["canary_of"] == task.instance_id
    assert "+    assert add(2, 3) == 6" in canary.test_patch  # the report says 5
    assert canary.FAIL_TO_PASS == task.FAIL_TO_PASS


def test_not_even_the_gold_patch_passes_a_canary(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    canary = make_canary(task)
    assert canary is not None
    result = grade(canary, task.patch)
    assert result.reward == 0.0 and result.tests["tests/test_hidden.py::test_add"] == "failed"
    assert "no gold patch" in result.log  # judged without a reference


def test_canaries_are_drawn_the_same_way_on_resume(tmp_path: Path) -> None:
    tasks = [make_task(tmp_path, name=f"calc-{i}") for i in range(3)]
    a = pick_canaries(tasks, 2, seed=7, materialize=lambda t: t)
    b = pick_canaries(tasks, 2, seed=7, materialize=lambda t: t)
    assert [c.instance_id for c in a] == [c.instance_id for c in b] and len(a) == 2


def test_a_task_with_nothing_to_contradict_gives_no_canary(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    assert make_canary(task.model_copy(update={"FAIL_TO_PASS": []})) is None
    assert make_canary(Task(instance_id="x", repo="r", problem_statement="p", patch="", test_patch="")) is None
