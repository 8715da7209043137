"""The in-process engine's scheduler: one worker thread takes queued requests in batches.

``generate`` calls put a :class:`~lego.engines.batching.PendingRequest` on the queue; the worker
takes up to ``max_batch_size`` waiting requests and hands them to ``run_batch`` (the decoder), which
may take more (``take_waiting``) while it decodes. The worker holds ``lock`` for a whole batch; a
weight swap (``paused()``) raises ``pausing`` so the running batch stops admitting, drains, and the
swap happens between batches.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from lego.engines.batching import PendingRequest
from lego.errors import EngineError, EngineUnavailableError

__all__ = ["BatchScheduler"]


class BatchScheduler:
    """Queue + worker thread + the lock weight swaps wait for (see the module docstring)."""

    def __init__(
        self, run_batch: Callable[[list[PendingRequest]], None], max_batch_size: int, stats: dict[str, int]
    ) -> None:
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.stats = stats
        self.stats.update(batches=0, max_batch_size_seen=0)
        self.lock = threading.Lock()  # held by the worker for a whole batch; weight swaps wait for it
        self._queue: queue.Queue[PendingRequest | None] = queue.Queue()
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
        """Hold generation between batches: the running batch stops taking in new requests, finishes,
        and then the caller holds the lock."""
        with self._pause_lock:
            self._pause_requests += 1
        try:
            with self.lock:
                yield
        finally:
            with self._pause_lock:
                self._pause_requests -= 1

    def close(self) -> threading.Thread | None:
        """Stop after the current batch; queued requests fail. Returns the worker to join."""
        self._queue.put(None)
        return self._worker

    def take_waiting(self, limit: int) -> list[PendingRequest]:
        """Requests queued since the batch started (never the close sentinel, which is put back)."""
        taken: list[PendingRequest] = []
        while len(taken) < limit:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                self._queue.put(None)
                break
            if not nxt.future.cancelled():
                taken.append(nxt)
        return taken

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                break
            stop = False
            # A waiting weight swap goes first (threading.Lock is not fair), so requests queued
            # behind it run on the new weights; then take the lock before collecting the batch:
            # whatever queued up meanwhile joins this batch.
            while self._pause_requests:
                time.sleep(0.001)
            with self.lock, torch.no_grad():
                batch = [first]
                while len(batch) < self.max_batch_size:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    batch.append(nxt)
                batch = [r for r in batch if not r.future.cancelled()]
                if batch:
                    self.stats["batches"] += 1
                    self.stats["max_batch_size_seen"] = max(self.stats["max_batch_size_seen"], len(batch))
                    try:
                        self.run_batch(batch)
                    except Exception as exc:  # keep the worker alive; each request learns what happened
                        error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
                        for r in batch:
                            r.resolve(error)
            if stop:
                break
        while True:  # closing: nothing queued after the sentinel will run
            try:
                left = self._queue.get_nowait()
            except queue.Empty:
                return
            if left is not None:
                left.resolve(EngineUnavailableError("the engine closed before this request ran; retry on a new engine"))
