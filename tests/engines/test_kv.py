"""The engine's KV cache: the same keys and values as transformers' DynamicCache, written in place."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from lego.engines.batching import merge_caches
from lego.engines.kv import MIN_ROOM, GrowingCache


def _kv(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, length, 8, generator=g), torch.randn(batch, 2, length, 8, generator=g)


def _same(a: DynamicCache, b: GrowingCache) -> None:
    assert len(a.layers) == len(b.layers)
    for x, y in zip(a.layers, b.layers, strict=True):
        assert torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
    assert a.get_seq_length() == b.get_seq_length()


def test_growing_cache_matches_dynamic_cache_through_prefill_steps_select_and_merge() -> None:
    ref, mine = DynamicCache(), GrowingCache()
    for layer in range(2):  # prefill: a long chunk
        for cache in (ref, mine):
            cache.update(*_kv(3, 50, layer), layer)
    _same(ref, mine)
    buffer = mine.layers[0]._k
    for step in range(MIN_ROOM):  # decode steps: one column each; past the first buffer's room
        for layer in range(2):
            k, v = _kv(3, 1, 100 + step * 2 + layer)
            out = [cache.update(k, v, layer) for cache in (ref, mine)]
            assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    _same(ref, mine)
    assert mine.layers[0]._k is not buffer  # it grew once
    assert mine.layers[0]._k.shape[-2] > 50 + MIN_ROOM  # with room to spare
    rows = torch.tensor([0, 2])
    for cache in (ref, mine):
        cache.batch_select_indices(rows)
    _same(ref, mine)
    other_ref, other_mine = DynamicCache(), GrowingCache()
    for layer in range(2):
        for cache in (other_ref, other_mine):
            cache.update(*_kv(2, 30, 500 + layer), layer)
    merge_caches(ref, other_ref, 0, 50 + MIN_ROOM - 30)
    merge_caches(mine, other_mine, 0, 50 + MIN_ROOM - 30)
    _same(ref, mine)
    for layer in range(2):  # and it keeps growing in place after the merge
        k, v = _kv(4, 1, 900 + layer)
        before = mine.layers[layer]._k.data_ptr()
        for cache in (ref, mine):
            cache.update(k, v, layer)
        assert mine.layers[layer]._k.data_ptr() == before
    _same(ref, mine)
