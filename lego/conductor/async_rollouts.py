"""Rollouts that never wait for the trainer: the producer behind ``training.max_staleness >= 1``.

The synchronous loop runs a step's B × G rollouts, waits for the slowest, trains, pushes weights
and only then starts the next step. Here a :class:`RolloutProducer` keeps ``training.concurrency``
rollouts in flight all the time, over an endless, deterministic plan of *groups*: group ``g`` is
task ``g % B`` of plan step ``g // B`` (the task, harness and per-rollout seeds the synchronous loop
would give that step, :mod:`lego.conductor.step_plan`), run ``G`` times. The trainer takes the first
B groups whose G rollouts have all ended, in the order they ended, so a straggling group is carried
into a later update instead of holding one up.

Bounded staleness. At most ``(1 + k) * B`` groups are open at once (planned, running, ended but
not taken, or taken by the update in progress): so at most ``k`` updates' worth of groups run ahead
of the batch being trained, and the producer starts the next groups the moment an update ends. A rollout spanning a weight update carries on
under the new weights (a partial rollout: each token records the version that sampled it,
``Segment.response_versions``). When the trainer takes a group, its *staleness* is the trainer's
version minus the oldest version among its sampled tokens; a group staler than ``k`` is dropped
and counted (``async/dropped_groups``), never trained on.

Exactness. The plan is a pure function of the config, so a resumed run knows every group: the
checkpoint records which groups its updates consumed (:class:`GroupLedger`), and after a kill or
Ctrl-C the producer starts again at the first group not consumed; groups that were in flight or
finished but untaken are redone, and no consumed group runs twice. Which groups meet in which
update depends on timing, so k >= 1 is reproducible per rollout (the seed reaches the sampler) but
not per batch; k = 0 is the synchronous loop, bit for bit (it does not use this module).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lego.conductor.drive import RolloutOptions
from lego.types import Task, Trajectory

__all__ = ["CompletedGroup", "GroupLedger", "GroupPlan", "RolloutProducer", "oldest_version"]

log = logging.getLogger("lego.conductor.async_rollouts")

RunOne = Callable[[Task, str, RolloutOptions], Trajectory]
"""One rollout, never raising for rollout failures (``RolloutRunner.run`` or a Ray backend's)."""


@dataclass(frozen=True)
class GroupPlan:
    """What group ``g`` is: its task, harness and the options of each of its G rollouts."""

    tasks_per_step: int
    job: Callable[[int], tuple[Task, str, list[RolloutOptions]]]
    """``job(g)`` → (task, harness, one RolloutOptions per rollout); a pure function of ``g``."""


@dataclass
class CompletedGroup:
    """A group whose G rollouts have all ended (infrastructure retries included)."""

    index: int
    task: Task
    harness: str
    trajectories: list[Trajectory]


def oldest_version(trajs: Iterable[Trajectory]) -> int | None:
    """The oldest policy version any sampled token of ``trajs`` was drawn from (None: nothing sampled)."""
    versions = [
        v
        for t in trajs
        for seg in t.segments
        for v, m in zip(seg.response_versions, seg.response_mask, strict=True)
        if m == 1 and v is not None
    ]
    return min(versions) if versions else None


@dataclass
class GroupLedger:
    """Which groups the updates so far consumed: every ``g < low`` plus the sparse ``above``.

    Stored in each checkpoint (``to_json``) so a resumed run neither repeats nor skips a group."""

    low: int = 0
    above: set[int] = field(default_factory=set)

    def add(self, g: int) -> None:
        self.above.add(g)
        while self.low in self.above:
            self.above.discard(self.low)
            self.low += 1

    def __contains__(self, g: object) -> bool:
        return isinstance(g, int) and (g < self.low or g in self.above)

    def to_json(self) -> dict[str, object]:
        return {"low": self.low, "above": sorted(self.above)}

    @classmethod
    def from_json(cls, data: object) -> GroupLedger:
        if not isinstance(data, dict):
            return cls()
        return cls(low=int(data.get("low", 0)), above={int(g) for g in data.get("above", [])})


class RolloutProducer:
    """Keeps ``concurrency`` rollouts in flight over the groups of ``plan`` (module doc).

    ``start()`` launches it; the trainer calls :meth:`take` for each update's groups, :meth:`consume`
    on them (and on any it drops) and :meth:`updated` after the update (which frees the trained
    groups' places, so further groups start); :meth:`stop` ends it,
    abandoning what is in flight (the harness's next model call fails once the proxy stops)."""

    def __init__(
        self,
        plan: GroupPlan,
        run_one: RunOne,
        *,
        concurrency: int,
        max_staleness: int,
        retries: int,
        ledger: GroupLedger,
        on_done: Callable[[Trajectory], None] | None = None,
    ) -> None:
        if max_staleness < 1:
            raise ValueError("the producer is for max_staleness >= 1; 0 is the synchronous loop")
        self.plan = plan
        self.run_one = run_one
        self.concurrency = max(1, concurrency)
        self.k = max_staleness
        self.retries = retries
        self.ledger = ledger
        self.on_done = on_done
        self._open: set[int] = set()  # planned and not yet consumed (module doc: the bound)
        self._training: list[int] = []  # consumed by the update in progress: open until it ends
        self._cv = threading.Condition()
        self._next = ledger.low  # the next group to consider starting
        self._in_flight = 0  # rollouts running now
        self._pending: dict[int, list[Trajectory | None]] = {}
        self._meta: dict[int, tuple[Task, str]] = {}  # group -> (task, harness)
        self._opts: dict[int, list[RolloutOptions]] = {}
        self._jobs: deque[tuple[int, int]] = deque()  # (group, rollout) planned, not yet started
        self._done: deque[CompletedGroup] = deque()
        self._stopped = False
        self._error: BaseException | None = None
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="rollout")
        self._thread = threading.Thread(target=self._dispatch, name="rollout-producer", daemon=True)
        self.rollouts_done = 0

    # -- the trainer's side --------------------------------------------------------------------
    def start(self) -> RolloutProducer:
        self._thread.start()
        return self

    def take(self, n: int, timeout: float | None = None) -> list[CompletedGroup]:
        """The first ``n`` completed groups, in the order they completed; waits for them.

        Waits in slices of at most ``timeout`` seconds and returns ``[]`` if none is ready by then,
        so a caller can stay interruptible (Ctrl-C lands between slices)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while len(self._done) < n:
                if self._error is not None:
                    raise self._error
                if self._stopped:
                    raise RuntimeError("the rollout producer was stopped")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return []
                self._cv.wait(left if left is not None else 0.5)
            return [self._done.popleft() for _ in range(n)]

    def consume(self, groups: Sequence[int], trained: bool = True) -> None:
        """Record ``groups`` as consumed: never run again, also after a resume. Called before the
        update's checkpoint, which stores the ledger. ``trained``: they are the update's batch and keep
        their places until :meth:`updated`; dropped groups (too stale) free theirs at once."""
        with self._cv:
            for g in groups:
                self.ledger.add(g)
                if trained:
                    self._training.append(g)
                else:
                    self._open.discard(g)
            self._cv.notify_all()

    def updated(self) -> None:
        """After an update: the trained groups' places are free, so the next groups start."""
        with self._cv:
            self._open.difference_update(self._training)
            self._training.clear()
            self._cv.notify_all()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def in_flight(self) -> int:
        with self._cv:
            return self._in_flight

    # -- the producer's side -------------------------------------------------------------------
    def _may_open(self) -> bool:
        return len(self._open) < (1 + self.k) * self.plan.tasks_per_step

    def _dispatch(self) -> None:
        try:
            while True:
                plan: int | None = None
                with self._cv:
                    while not self._stopped and not self._ready():
                        self._cv.wait(0.5)
                    if self._stopped:
                        return
                    if self._jobs:
                        g, i = self._jobs.popleft()
                        self._in_flight += 1
                        task, harness = self._meta[g]
                        opts = self._opts[g][i]
                    else:
                        plan, self._next = self._next, self._next + 1
                if plan is not None:
                    if plan not in self.ledger:
                        with self._cv:
                            self._open.add(plan)
                        self._plan(plan)  # outside the lock: it may materialise the task's repo
                    continue
                self._pool.submit(self._run, g, i, task, harness, opts)
        except BaseException as exc:  # a bug in the plan must reach the trainer, not vanish in a thread
            log.exception("the rollout producer failed")
            with self._cv:
                self._error = exc
                self._cv.notify_all()

    def _ready(self) -> bool:
        """Whether a rollout can start, or the next group be planned, now (lock held)."""
        if self._in_flight >= self.concurrency:
            return False
        return bool(self._jobs) or self._may_open()

    def _plan(self, g: int) -> None:
        task, harness, opts = self.plan.job(g)
        with self._cv:
            self._meta[g] = (task, harness)
            self._opts[g] = opts
            self._pending[g] = [None] * len(opts)
            self._jobs.extend((g, i) for i in range(len(opts)))
            self._cv.notify_all()

    def _run(self, g: int, i: int, task: Task, harness: str, opts: RolloutOptions) -> None:
        try:
            traj = self.run_one(task, harness, opts)
            runs = 1
            while traj.is_infra_failure and runs <= self.retries and not self._stopped:
                runs += 1
                traj = self.run_one(task, harness, opts)
                traj.metadata["attempts"] = runs
        except BaseException as exc:
            with self._cv:
                self._error = exc
                self._in_flight -= 1
                self._cv.notify_all()
            return
        if self.on_done is not None:
            self.on_done(traj)
        with self._cv:
            self._in_flight -= 1
            self.rollouts_done += 1
            slots = self._pending[g]
            slots[i] = traj
            if all(t is not None for t in slots):
                del self._pending[g]
                task_, harness_ = self._meta.pop(g)
                self._opts.pop(g, None)
                done = [t for t in slots if t is not None]
                self._done.append(CompletedGroup(g, task_, harness_, done))
            self._cv.notify_all()
