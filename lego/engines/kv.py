"""The in-process engine's KV cache: per-layer buffers with spare room, written in place.

transformers' ``DynamicCache`` grows every layer by ``torch.cat`` on each forward, so one decode step
copies the whole cache of the batch (allocating it anew) to add one column: at agent prompt lengths
that copy is a large share of a step on a CPU. :class:`GrowingCache` keeps each layer's keys and
values in a buffer with room to spare (doubled when full) and writes new columns into it; the model
sees views of the filled part, the same values in the same layout, so logits do not change (the
engine tests compare them against an unpadded teacher-forced pass).

Rows leave (:meth:`GrowingLayer.batch_select_indices`) and batches merge
(:func:`lego.engines.batching.merge_caches`, which gives a merged layer a buffer of its own through
:meth:`GrowingLayer.set`) as with ``DynamicCache``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["GrowingCache", "GrowingLayer"]

MIN_ROOM = 64  # columns a new buffer holds at least


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, ``(batch, heads, length, head_dim)`` views of buffers with spare
    columns; ``update`` writes in place and reallocates (doubling) only when the buffer is full."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._n = 0

    def _reserve(self, like: torch.Tensor, length: int) -> None:
        """Make room for ``length`` columns (keeping the filled ones)."""
        if self._k is not None and length <= self._k.shape[-2]:
            return
        shape = (like.shape[0], like.shape[1], max(MIN_ROOM, 2 * length), like.shape[3])
        k, v = like.new_empty(shape), like.new_empty(shape)
        if self._k is not None and self._v is not None and self._n:
            k[:, :, : self._n] = self._k[:, :, : self._n]
            v[:, :, : self._n] = self._v[:, :, : self._n]
        self._k, self._v = k, v

    def _expose(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Point ``keys``/``values`` at the filled part of the buffers; returns them."""
        assert self._k is not None and self._v is not None
        keys, values = self._k[:, :, : self._n], self._v[:, :, : self._n]
        self.keys, self.values = keys, values
        return keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        added = key_states.shape[-2]
        self._reserve(key_states, self._n + added)
        assert self._k is not None and self._v is not None
        self._k[:, :, self._n : self._n + added] = key_states
        self._v[:, :, self._n : self._n + added] = value_states
        self._n += added
        return self._expose()

    def set(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Replace the contents by ``keys``/``values`` (copied into a buffer with room to spare)."""
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        self._k = self._v = None
        self._n = 0
        self.update(keys, values)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._k is None or self._v is None or not self._n:
            return
        self._k, self._v = self._k[indices], self._v[indices]
        self._expose()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of columns to remove, not {tokens_to_remove}")
        if tokens_to_remove and self._k is not None:
            self._n = max(0, self._n + tokens_to_remove)
            self._expose()

    def reset(self) -> None:
        self._k = self._v = None
        self._n = 0
        super().reset()


class GrowingCache(DynamicCache):
    """A ``DynamicCache`` whose layers are :class:`GrowingLayer` (one per model layer, made on first use)."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)
