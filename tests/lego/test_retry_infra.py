"""A rollout that failed on infrastructure is rerun, and the kept one says how many runs it took."""

from __future__ import annotations

from lego.conductor.loop import retry_infra
from lego.types import Trajectory


def _script(outcomes: dict[str, list[str]]):
    """A ``run`` that plays each job's causes in order, one per run, and logs the batches it got."""
    runs: list[list[str]] = []

    def run(jobs: list[str]) -> list[Trajectory]:
        runs.append(list(jobs))
        return [
            Trajectory(trajectory_id=f"{job}-{len(runs)}", session_id=job, cause=outcomes[job].pop(0)) for job in jobs
        ]

    return run, runs


def test_a_rerun_rollout_records_the_runs_its_job_took() -> None:
    run, runs = _script(
        {
            "ok": ["policy"],
            "second": ["infrastructure", "policy"],
            "third": ["infrastructure", "infrastructure", "policy"],
            "never": ["infrastructure", "infrastructure", "infrastructure"],
        }
    )
    rounds: list[int] = []
    trajs = retry_infra(run, ["ok", "second", "third", "never"], retries=2, on_retry=rounds.append)
    assert runs == [["ok", "second", "third", "never"], ["second", "third", "never"], ["third", "never"]]
    assert rounds == [3, 2]
    assert [t.trajectory_id for t in trajs] == ["ok-1", "second-2", "third-3", "never-3"]
    assert [t.metadata.get("attempts") for t in trajs] == [None, 2, 3, 3]
    assert [t.cause for t in trajs] == ["policy", "policy", "policy", "infrastructure"]


def test_no_retries_runs_each_job_once() -> None:
    run, runs = _script({"a": ["infrastructure"]})
    trajs = retry_infra(run, ["a"], retries=0)
    assert runs == [["a"]]
    assert "attempts" not in trajs[0].metadata
