"""Stragglers: a rollout of a synchronous step that runs far past the others is cut at a turn boundary.

A synchronous step waits for its slowest rollout, and agentic rollouts have a long tail (a harness
looping to its turn limit, a slow test suite). With ``training.straggler_multiple = m`` (0: off), once
at least half of the step's rollouts have ended, a rollout still running after ``m`` times the median
duration of the ended ones is *cut*: the proxy serves its session no new generation (a generation in
flight completes and is recorded; :meth:`lego.proxies.service.ProxyService.cut_session`), the harness
ends on the refusal as it does at its turn limit, and the diff the agent left is graded. The rollout's
termination is ``cut`` and its cause the policy's: a straggler is scored on what it did, never masked
as infrastructure (a policy that stalls must not be paid by having its rollout dropped).

Why the median of the *ended* rollouts once half have ended: the rollouts still running are the
longer ones, so that median is at most the step's; a cut never waits for a rollout that may never end,
and ``m`` >= 2 keeps a normal spread from being cut. In the asynchronous loop
(``training.max_staleness`` >= 1) a straggler instead joins a later update, so the two are exclusive.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Callable

__all__ = ["StragglerWatch"]

log = logging.getLogger("lego.conductor.stragglers")


class StragglerWatch:
    """Watches one batch of ``total`` rollouts and cuts its stragglers (module doc).

    ``cut(session_id, reason)`` stops a session at its next turn boundary; ``multiple``: how many
    median durations a rollout may run (0: the watch is off, it cuts nothing and starts no thread); ``clock``: seconds, monotonic. The runner calls :meth:`started`
    and :meth:`ended` per session; a background thread (``with watch:``) calls :meth:`check` every
    ``poll_s``. Thread-safe."""

    def __init__(
        self,
        cut: Callable[[str, str], bool],
        multiple: float,
        total: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float = 0.5,
    ) -> None:
        if multiple < 0:
            raise ValueError(f"multiple must be 0 (off) or positive, got {multiple}")
        self._cut, self.multiple, self.total = cut, multiple, total
        self._clock, self._poll_s = clock, poll_s
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}
        self._durations: list[float] = []
        self.cut_sessions: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self, session_id: str) -> None:
        with self._lock:
            self._running[session_id] = self._clock()

    def ended(self, session_id: str) -> None:
        with self._lock:
            began = self._running.pop(session_id, None)
            if began is not None and session_id not in self.cut_sessions:
                self._durations.append(self._clock() - began)

    def limit_s(self) -> float | None:
        """The running time past which a rollout is cut now; None until half the batch has ended."""
        with self._lock:
            if not self.multiple or len(self._durations) < math.ceil(self.total / 2):
                return None
            return self.multiple * statistics.median(self._durations)

    def check(self) -> list[str]:
        """Cut every rollout running past :meth:`limit_s`; returns the sessions cut by this call."""
        limit = self.limit_s()
        if limit is None:
            return []
        now = self._clock()
        with self._lock:
            late = [
                (sid, now - t) for sid, t in self._running.items() if sid not in self.cut_sessions and now - t > limit
            ]
        done: list[str] = []
        for sid, ran in late:
            reason = (
                f"a straggler: {ran:.0f}s against {limit:.0f}s, {self.multiple:g} x the median of the step's "
                "ended rollouts (training.straggler_multiple); the diff so far is graded"
            )
            if self._cut(sid, reason):
                with self._lock:
                    self.cut_sessions[sid] = reason
                log.info("cut %s: %s", sid, reason)
                done.append(sid)
        return done

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.check()

    def __enter__(self) -> StragglerWatch:
        if not self.multiple:
            return self
        self._thread = threading.Thread(target=self._loop, name="straggler-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
