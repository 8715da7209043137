"""What a step works on (lego.conductor.step_plan): the seeded walk over the tasks, and the tasks
`tasks.min_behavioural_evidence` passes over."""

from __future__ import annotations

from lego.conductor.step_plan import step_tasks
from lego.types import Task


def _tasks(n: int) -> list[Task]:
    return [Task(instance_id=f"t{i}", repo="r", problem_statement="p", patch="", test_patch="") for i in range(n)]


def test_the_walk_is_the_same_on_resume_and_covers_every_task_in_an_epoch() -> None:
    tasks = _tasks(6)
    steps = [[t.instance_id for t in step_tasks(tasks, s, 2, seed=3)] for s in range(3)]
    assert steps == [[t.instance_id for t in step_tasks(tasks, s, 2, seed=3)] for s in range(3)]
    assert sorted(i for step in steps for i in step) == sorted(t.instance_id for t in tasks)


def test_a_task_without_enough_evidence_is_passed_over_for_the_next_of_the_walk() -> None:
    tasks = _tasks(6)
    weak = {"t1", "t4"}
    plain = [t.instance_id for s in range(3) for t in step_tasks(tasks, s, 2, seed=3)]
    kept = step_tasks(tasks, 0, 2, seed=3, usable=lambda t: t.instance_id not in weak)
    assert len(kept) == 2 and not weak & {t.instance_id for t in kept}
    assert [t.instance_id for t in kept] == [i for i in plain if i not in weak][:2]
    assert step_tasks(tasks, 0, 2, seed=3, usable=lambda t: False) == []  # nothing usable: an empty step, not a hang


def test_a_mixed_runs_canaries_take_its_harnesses_in_turn_and_the_same_on_resume() -> None:
    """``tasks.canary_rate`` of the step's B × G rollouts (at least one), drawn by the step's seed; a mixed
    run's canaries go to each of its harnesses in turn (never the joined name of the run)."""
    from lego.conductor.step_plan import canary_jobs
    from lego.config import load_config
    from lego.tasks.sources import load_source

    source = load_source("boundary:train")
    records = source.records()[:6]
    cfg = load_config(
        None,
        [
            "tasks.canary_rate=0.5",
            "training.tasks_per_step=3",
            "algorithm.group_size=2",
            "harness.weights={lego-agent = 1.0, aider = 1.0, mini-swe-agent = 1.0}",
        ],
    )
    jobs = canary_jobs(cfg, records, source, step=4)
    assert len(jobs) == 3  # half of 3 × 2
    assert sorted(h for _, h, _ in jobs) == ["aider", "lego-agent", "mini-swe-agent"]
    assert all(t.instance_id.startswith("canary-") and t.metadata["canary"] for t, _, _ in jobs)
    again = canary_jobs(cfg, records, source, step=4)
    assert [(t.instance_id, h, o.seed) for t, h, o in again] == [(t.instance_id, h, o.seed) for t, h, o in jobs]
    assert canary_jobs(load_config(None, ["tasks.canary_rate=0"]), records, source, step=4) == []
