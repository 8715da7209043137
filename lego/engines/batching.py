"""Bookkeeping for the in-process engine's batches: a pending request, and merging KV caches.

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

__all__ = ["PendingRequest", "can_merge", "merge_caches"]


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


def can_merge(cache: Any) -> bool:
    """Whether ``cache`` exposes per-layer key/value tensors (transformers >= 4.56's DynamicCache).
    Without them the engine still works, but requests wait for the running batch to finish."""
    layers = getattr(cache, "layers", None) or []
    return bool(layers) and all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers)


def merge_caches(into: Any, other: Any, pad_into: int, pad_other: int) -> None:
    """Concatenate two KV caches along the batch, left-padding the shorter one's sequence axis."""
    for a, b in zip(into.layers, other.layers, strict=True):
        a.keys = torch.cat([F.pad(a.keys, (0, 0, pad_into, 0)), F.pad(b.keys, (0, 0, pad_other, 0))], dim=0)
        a.values = torch.cat([F.pad(a.values, (0, 0, pad_into, 0)), F.pad(b.values, (0, 0, pad_other, 0))], dim=0)
