"""The in-process engine's scheduler: one worker thread takes queued requests in batches.

``generate`` calls put a :class:`~lego.engines.batching.PendingRequest` on the queue; the worker
takes waiting requests (:meth:`BatchScheduler.take`) and hands them to ``run_batch`` (the decoder),
which takes more while it decodes. The worker holds ``lock`` while it decodes; a weight swap
(``paused()``) raises ``pausing``, and the running batch hands the lock over at its next decode step
(:meth:`BatchScheduler.yield_to_pause`) and takes it back when the swap is done: a swap waits for one
decode step, not for the longest generation in flight (what the decoder does with its rows then:
``lego.engines.decode``).

Admission control: requests are taken in arrival order while the batch stays within
``max_batch_size`` rows and its :class:`~lego.engines.batching.Footprint` (rows x (padded width +
the most tokens a row may still generate)) within ``max_batch_tokens``. The first request that does
not fit waits at the head of the line, and nothing behind it overtakes it, so a long prompt is
delayed, never starved. A request over the budget on its own runs alone (an empty batch admits
anything): it cannot wait for room that will never come.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from lego.engines.batching import Footprint, PendingRequest
from lego.errors import EngineError, EngineUnavailableError

__all__ = ["BatchScheduler"]


class BatchScheduler:
    """Queue + worker thread + the lock weight swaps wait for (see the module docstring)."""

    def __init__(
        self,
        run_batch: Callable[[list[PendingRequest]], None],
        max_batch_size: int,
        stats: dict[str, int],
        max_batch_tokens: int | None = None,
    ) -> None:
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.stats = stats
        self.stats.update(batches=0, max_batch_size_seen=0, admission_waits=0, swaps_mid_batch=0)
        self.lock = threading.Lock()  # held by the worker for a whole batch; weight swaps wait for it
        self._queue: queue.Queue[PendingRequest | None] = queue.Queue()
        self._head: PendingRequest | None = None  # taken off the queue, waiting for room (worker thread only)
        self._closing = False  # the close sentinel was taken: admit nothing more
        self._worker: threading.Thread | None = None
        self._pause_lock = threading.Lock()
        self._pause_requests = 0  # > 0 while paused() waits: the running batch stops admitting

    @property
    def pausing(self) -> bool:
        """Whether a weight swap waits for the running batch."""
        return self._pause_requests > 0

    def submit(self, request: PendingRequest) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="lego-transformers-engine", daemon=True)
            self._worker.start()
        self._queue.put(request)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold generation: the running batch stops taking in new requests and hands over the lock at
        its next decode step; the caller then holds it until the block ends."""
        with self._pause_lock:
            self._pause_requests += 1
        try:
            with self.lock:
                yield
        finally:
            with self._pause_lock:
                self._pause_requests -= 1

    def yield_to_pause(self) -> None:
        """Worker thread, holding ``lock`` between two decode steps: let every waiting ``paused()``
        caller run, then hold the lock again. Returns at once when nobody waits."""
        if not self._pause_requests:
            return
        self.lock.release()
        try:
            while self._pause_requests:  # a caller decrements only after releasing the lock
                time.sleep(0.001)
        finally:
            self.lock.acquire()
        self.stats["swaps_mid_batch"] += 1

    def close(self) -> threading.Thread | None:
        """Stop after the current batch; queued requests fail. Returns the worker to join."""
        self._queue.put(None)
        return self._worker

    def take(self, batch: Footprint) -> list[PendingRequest]:
        """Waiting requests, in arrival order, that fit beside ``batch`` (its rows still running).

        Stops at the first request that would push the batch past ``max_batch_size`` rows or
        ``max_batch_tokens`` (that request keeps its place at the head of the line); an empty
        ``batch`` takes its first request whatever its size."""
        taken: list[PendingRequest] = []
        while batch.rows < self.max_batch_size and not self._closing:
            nxt, waited = self._head, self._head is not None
            self._head = None
            if nxt is None:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
            if nxt is None:
                self._closing = True
                break
            if nxt.future.cancelled():
                continue
            grown = batch.plus(nxt)
            if batch.rows and self.max_batch_tokens is not None and grown.tokens > self.max_batch_tokens:
                self._head = nxt
                self.stats["admission_waits"] += 0 if waited else 1  # requests that waited for room, once each
                break
            taken.append(nxt)
            batch = grown
        return taken

    def _run(self) -> None:
        while not self._closing:
            if self._head is None:
                first = self._queue.get()
                if first is None:
                    break
                self._head = first
            # A waiting weight swap goes first (threading.Lock is not fair), so requests queued
            # behind it run on the new weights; then take the lock before collecting the batch:
            # whatever queued up meanwhile joins this batch.
            while self._pause_requests:
                time.sleep(0.001)
            with self.lock, torch.no_grad():
                batch = self.take(Footprint())
                if batch:
                    self.stats["batches"] += 1
                    self.stats["max_batch_size_seen"] = max(self.stats["max_batch_size_seen"], len(batch))
                    try:
                        self.run_batch(batch)
                    except Exception as exc:  # keep the worker alive; each request learns what happened
                        error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
                        for r in batch:
                            r.resolve(error)
        closed = EngineUnavailableError("the engine closed before this request ran; retry on a new engine")
        while True:  # closing: nothing queued after the sentinel will run
            try:
                left = self._queue.get_nowait()
            except queue.Empty:
                return
            if left is not None:
                left.resolve(closed)
