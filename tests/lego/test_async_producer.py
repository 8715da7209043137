"""The asynchronous rollout producer's contract (`lego.conductor.async_rollouts`), on rollouts whose
durations are scripted so the schedule is the thing under test: rollouts stay in flight while the
trainer works; no group starts more than k updates ahead; a straggling group is carried into a later
update instead of holding one up; a resumed ledger neither repeats nor skips a group; an
infrastructure failure is retried; a group's staleness is read from its tokens' recorded versions.
The end-to-end run (real harness, sandbox, engine and trainer) is in test_train_async.py."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from lego.conductor.async_rollouts import GroupLedger, GroupPlan, RolloutProducer, oldest_version
from lego.conductor.drive import RolloutOptions
from lego.types import Segment, Task, Trajectory

B, G = 2, 2


def _task(g: int) -> Task:
    return Task(instance_id=f"t{g}", repo="r", problem_statement="p", patch="")


def _plan() -> GroupPlan:
    def job(g: int) -> tuple[Task, str, list[RolloutOptions]]:
        opts = [RolloutOptions(override_sampling=True, temperature=1.0, seed=g * 10 + k) for k in range(G)]
        return _task(g), "lego-agent", opts

    return GroupPlan(B, job)


class Rollouts:
    """Rollouts that take ``durations[group]`` seconds (default ``base``), stamped with the version
    in force when they end; records when each started and how many ran at once."""

    def __init__(self, base: float = 0.05, durations: dict[int, float] | None = None) -> None:
        self.base, self.durations = base, durations or {}
        self.version = 0
        self.started: list[int] = []
        self.lock = threading.Lock()
        self.running = self.peak = 0
        self.fail_once: set[int] = set()

    def __call__(self, task: Task, harness: str, opts: RolloutOptions) -> Trajectory:
        g = int(task.instance_id[1:])
        with self.lock:
            self.started.append(g)
            self.running += 1
            self.peak = max(self.peak, self.running)
            v = self.version
            fail = opts.seed in self.fail_once
            self.fail_once.discard(opts.seed if opts.seed is not None else -1)
        time.sleep(self.durations.get(g, self.base))
        with self.lock:
            self.running -= 1
        seg = Segment(
            prompt_ids=[1],
            response_ids=[5, 6],
            response_mask=[1, 1],
            response_logprobs=[-1.0, -1.0],
            response_versions=[v, self.version],
        )
        return Trajectory(
            trajectory_id=uuid.uuid4().hex,
            session_id="s",
            task_id=task.instance_id,
            harness=harness,
            segments=[seg],
            reward=1.0,
            cause="infrastructure" if fail else "policy",
        )


def _producer(r: Rollouts, k: int, ledger: GroupLedger | None = None, concurrency: int = 4) -> RolloutProducer:
    return RolloutProducer(
        _plan(),
        r,
        concurrency=concurrency,
        max_staleness=k,
        retries=1,
        ledger=ledger or GroupLedger(),
    ).start()


def test_no_group_starts_more_than_k_updates_ahead_and_rollouts_run_while_the_trainer_works() -> None:
    r = Rollouts()
    p = _producer(r, k=1)
    try:
        first = p.take(B)
        time.sleep(0.3)  # "training": no more than (1 + k) * B groups are open, the batch in training included
        assert max(r.started) == (1 + 1) * B - 1
        assert sorted(grp.index for grp in first) == [0, 1]
        p.consume([grp.index for grp in first])
        p.updated()
        r.version += 1
        second = p.take(B)
        assert sorted(grp.index for grp in second) == [2, 3]  # produced during the "update"
        time.sleep(0.3)
        assert max(r.started) == (1 + 1 + 1) * B - 1  # the first batch's places were freed by its update
        assert r.peak == 4  # concurrency held
    finally:
        p.stop()


def test_a_straggling_group_is_carried_into_a_later_update() -> None:
    r = Rollouts(durations={0: 0.6})
    p = _producer(r, k=2)
    try:
        batch = p.take(B)
        assert 0 not in {grp.index for grp in batch}  # group 0 is still running: the update does not wait
        p.consume([grp.index for grp in batch])
        p.updated()
        updates = 1
        while 0 not in {grp.index for grp in batch}:  # later updates go on without it, until it ends
            batch = p.take(B, timeout=5)
            p.consume([grp.index for grp in batch])
            p.updated()
            updates += 1
        assert updates > 2
    finally:
        p.stop()


def test_a_resumed_ledger_repeats_and_skips_nothing() -> None:
    ledger = GroupLedger()
    for g in (0, 1, 2, 4):  # consumed before the kill; 3 was in flight
        ledger.add(g)
    assert (ledger.low, ledger.above) == (3, {4})
    assert GroupLedger.from_json(ledger.to_json()) == ledger
    r = Rollouts()
    p = _producer(r, k=1, ledger=GroupLedger.from_json(ledger.to_json()))
    try:
        got = p.take(B)
        assert sorted(grp.index for grp in got) == [3, 5]
        assert 4 not in r.started and min(r.started) == 3
    finally:
        p.stop()


def test_an_infrastructure_failure_is_retried_and_counted() -> None:
    r = Rollouts()
    r.fail_once = {0}  # group 0's first rollout (seed 0)
    p = _producer(r, k=1)
    try:
        g0 = None
        while g0 is None:  # its retry makes group 0 end after others
            got = p.take(1, timeout=5)
            g0 = next((grp for grp in got if grp.index == 0), None)
            p.consume([grp.index for grp in got])
            p.updated()
        assert [t.is_infra_failure for t in g0.trajectories] == [False, False]
        assert g0.trajectories[0].metadata["attempts"] == 2
    finally:
        p.stop()


def test_staleness_is_read_from_the_tokens_versions() -> None:
    seg = Segment(
        prompt_ids=[1],
        response_ids=[5, 6, 7],
        response_mask=[1, 0, 1],
        response_logprobs=[-1.0, None, -1.0],
        response_versions=[3, None, 4],
    )
    t = Trajectory(trajectory_id="a", session_id="s", segments=[seg])
    assert oldest_version([t]) == 3
    assert oldest_version([Trajectory(trajectory_id="b", session_id="s")]) is None


def test_k_zero_is_the_synchronous_loop_not_this_producer() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        RolloutProducer(_plan(), Rollouts(), concurrency=1, max_staleness=0, retries=0, ledger=GroupLedger())
