"""Bookkeeping for the in-process engine's batches: a pending request, a batch's token footprint
(what admission control counts), and merging KV caches.

Merging lets a request join a running batch: it is prefilled on its own, then its cache and the
batch's are left-padded to the same length and concatenated along the batch axis. The attention
mask marks the padding and every row carries explicit position ids, so the padding never changes a
row's result (the engine tests check this against an unpadded teacher-forced pass).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from lego.types import Generation, SamplingParams

__all__ = ["Footprint", "PendingRequest", "can_merge", "merge_caches"]


@dataclass
class PendingRequest:
    """One generate() call on its way through the worker; resolved on its own event loop."""

    prompt_ids: list[int]
    sampling: SamplingParams
    max_tokens: int
    seed: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Generation]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version that sampled each token
    started_at: float = 0.0
    on_tokens: Callable[[list[int]], None] | None = None

    def emit(self, token_id: int) -> None:
        """Hand one sampled id to the caller's stream (on its loop), if it streams."""
        sink = self.on_tokens
        if sink is not None and not self.future.done():
            self.loop.call_soon_threadsafe(sink, [token_id])

    def resolve(self, result: Generation | BaseException) -> None:
        def _set() -> None:
            if self.future.done():
                return
            if isinstance(result, BaseException):
                self.future.set_exception(result)
            else:
                self.future.set_result(result)

        self.loop.call_soon_threadsafe(_set)


@dataclass(frozen=True)
class Footprint:
    """How many token slots a batch's KV cache may come to hold, padding included.

    Rows are left-padded to one ``width`` (a joining request's prompt widens the whole batch) and
    every decode step adds a column to every row, so a batch whose rows may still generate up to
    ``longest`` tokens reaches at most ``rows * (width + longest)`` slots. The scheduler admits a
    request only while that bound stays within ``engine.max_batch_tokens``; the decoder records the
    slots it really ran (``stats["peak_batch_tokens"]``)."""

    rows: int = 0
    width: int = 0
    longest: int = 0  # the most tokens any row may still generate

    @property
    def tokens(self) -> int:
        return self.rows * (self.width + self.longest)

    def plus(self, request: PendingRequest) -> Footprint:
        """The footprint with ``request`` admitted (prefilled, not yet sampled)."""
        return Footprint(self.rows + 1, max(self.width, len(request.prompt_ids)), max(self.longest, request.max_tokens))


def can_merge(cache: Any) -> bool:
    """Whether ``cache`` exposes per-layer key/value tensors (transformers >= 4.56's DynamicCache).
    Without them the engine still works, but requests wait for the running batch to finish."""
    layers = getattr(cache, "layers", None) or []
    return bool(layers) and all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers)


def merge_caches(into: Any, other: Any, pad_into: int, pad_other: int) -> None:
    """Concatenate two KV caches along the batch, left-padding the shorter one's sequence axis."""
    for a, b in zip(into.layers, other.layers, strict=True):
        keys = torch.cat([F.pad(a.keys, (0, 0, pad_into, 0)), F.pad(b.keys, (0, 0, pad_other, 0))], dim=0)
        values = torch.cat([F.pad(a.values, (0, 0, pad_into, 0)), F.pad(b.values, (0, 0, pad_other, 0))], dim=0)
        if hasattr(a, "set"):  # lego.engines.kv.GrowingLayer: into a buffer with room to grow
            a.set(keys, values)
        else:
            a.keys, a.values = keys, values
