"""The in-process engine's shared-prefix KV cache.

Every request of an agent starts with the same system prompt and tool schemas (most of a turn's
prompt). The cache keeps the longest common prefix of the engine's recent prompts with its KV,
computed once per ``policy_version``; a batch whose prompts all extend it prefills only the rest
(``lego.engines.decode``). A weight update invalidates it (the version no longer matches).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CachedPrefix", "PrefixCache"]

PREFIX_WINDOW = 8  # prompts whose common prefix is cached
PREFIX_MIN = 64  # tokens: a shorter common prefix is not worth a cache


class CachedPrefix:
    """The KV of ``ids`` under the weights of ``version``: one (keys, values) pair per layer, batch 1."""

    def __init__(self, ids: list[int], version: int, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.ids, self.version, self.layers = ids, version, layers

    def fits(self, prompt: list[int]) -> bool:
        return len(prompt) > len(self.ids) and prompt[: len(self.ids)] == self.ids


def common_prefix_len(prompts: list[list[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        tok = first[i]
        if any(p[i] != tok for p in prompts[1:]):
            return i
    return n


class PrefixCache:
    """Tracks recent prompts and holds the KV of their common prefix (worker thread only)."""

    def __init__(self, enabled: bool, stats: dict[str, int]) -> None:
        self.enabled = enabled
        self.stats = stats
        self.stats.update(prefix_hits=0, prefix_builds=0, prefix_tokens_saved=0)
        self._recent: deque[list[int]] = deque(maxlen=PREFIX_WINDOW)
        self._prefix: CachedPrefix | None = None

    def lookup(self, prompts: list[list[int]], version: int, encode: Callable[[list[int]], Any]) -> CachedPrefix | None:
        """The cached prefix every prompt extends, (re)built when the weights changed or the recent
        prompts share a different one; None when there is none worth using. ``encode(ids)`` runs
        ``ids`` through the model (the decoder's chunked prefill) and returns the filled KV cache."""
        self._recent.extend(prompts)
        if not self.enabled or len(self._recent) < 2:
            return None
        prefix = self._prefix
        if prefix is None or not all(prefix.fits(p) for p in prompts):
            n = common_prefix_len(list(self._recent))
            if n < PREFIX_MIN:
                return None
            ids = list(self._recent[0][:n])
            if not all(len(p) > n and p[:n] == ids for p in prompts):
                return None
            prefix = CachedPrefix(ids, -1, [])
        if prefix.version != version:
            prefix = self._build(prefix.ids, version, encode)
        self._prefix = prefix
        return prefix

    def _build(self, ids: list[int], version: int, encode: Callable[[list[int]], Any]) -> CachedPrefix:
        cached: Any = encode(ids).layers
        self.stats["prefix_builds"] += 1
        return CachedPrefix(ids, version, [(layer.keys.clone(), layer.values.clone()) for layer in cached])
