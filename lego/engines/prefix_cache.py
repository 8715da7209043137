"""The in-process engine's prefix KV caches: the prefix all recent prompts share, and finished sequences.

Every request of an agent starts with the same system prompt and tool schemas, and every turn of a
session after the first starts with the whole previous turn (its prompt and the completion the
engine sampled) -- in an agent rollout most of a prompt was run through the model before. Two
caches, both keyed by token ids and valid for one ``policy_version`` (a weight update invalidates
them):

* the **shared prefix**: the longest common prefix of the engine's recent prompts, with its KV,
  computed once per version;
* **finished sequences**: when a request ends, its row's KV (prompt and generated tokens, padding
  removed) is kept, up to ``session_bytes`` in all, least recently used dropped first. A new prompt
  reuses the KV of its longest common prefix with any of them (a prefix of a causal sequence has the
  same KV whatever followed it), so a session's next turn prefills only the tool result and what
  the template adds around it.

:meth:`PrefixCache.lookup` gives each prompt of a batch its best (cached prefix, length); the decoder
lays the rows out as ``[left pad][cached prefix][left pad][rest of the prompt]`` and prefills only
the rest (``lego.engines.decode``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["CachedPrefix", "PrefixCache"]

PREFIX_WINDOW = 8  # prompts whose common prefix is cached
PREFIX_MIN = 64  # tokens: a shorter common prefix is not worth a cache


class CachedPrefix:
    """The KV of ``ids`` under the weights of ``version``: one (keys, values) pair per layer, batch 1."""

    def __init__(self, ids: list[int], version: int, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.ids, self.version, self.layers = ids, version, layers
        self.array = np.asarray(ids, dtype=np.int64)

    def fits(self, prompt: list[int]) -> bool:
        return len(prompt) > len(self.ids) and prompt[: len(self.ids)] == self.ids

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)

    def shared_with(self, prompt: np.ndarray) -> int:
        """How many leading tokens ``prompt`` shares with these ids."""
        n = min(len(self.array), len(prompt))
        differ = np.flatnonzero(self.array[:n] != prompt[:n])
        return int(differ[0]) if len(differ) else n


def common_prefix_len(prompts: list[list[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        tok = first[i]
        if any(p[i] != tok for p in prompts[1:]):
            return i
    return n


class PrefixCache:
    """Tracks recent prompts and holds the shared prefix's KV and finished sequences' (worker thread only)."""

    def __init__(self, enabled: bool, stats: dict[str, int], session_bytes: int = 0) -> None:
        self.enabled = enabled
        self.session_bytes = session_bytes if enabled else 0
        self.stats = stats
        self.stats.update(prefix_hits=0, prefix_builds=0, prefix_tokens_saved=0, session_hits=0, sessions_kept=0)
        self._recent: deque[list[int]] = deque(maxlen=PREFIX_WINDOW)
        self._prefix: CachedPrefix | None = None
        self._finished: OrderedDict[int, CachedPrefix] = OrderedDict()  # least recently used first
        self._finished_bytes = 0
        self._next_key = 0

    def lookup(
        self, prompts: list[list[int]], version: int, encode: Callable[[list[int]], Any]
    ) -> list[tuple[CachedPrefix, int] | None]:
        """For each prompt, the cached prefix to start from and how many of its tokens to use (always
        fewer than the prompt's: the last prompt token must run to give the first logits), or None.
        ``encode(ids)`` runs ``ids`` through the model and returns the filled KV cache; it builds the
        shared prefix when the weights changed or the recent prompts share a different one."""
        shared = self._shared(prompts, version, encode)
        if self._finished and next(iter(self._finished.values())).version != version:
            self._drop_all()
        rows: list[tuple[CachedPrefix, int] | None] = []
        for prompt in prompts:
            best = (shared, len(shared.ids)) if shared is not None and shared.fits(prompt) else None
            best_key = -1
            array = np.asarray(prompt, dtype=np.int64)
            for key, entry in self._finished.items():
                n = min(entry.shared_with(array), len(prompt) - 1)
                if n >= PREFIX_MIN and (best is None or n > best[1]):
                    best, best_key = (entry, n), key
            if best is not None and best[0] is not shared:
                self._finished.move_to_end(best_key)
                self.stats["session_hits"] += 1
            rows.append(best)
        return rows

    def remember(self, ids: list[int], version: int, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep a finished row's KV (``ids``: the tokens it holds, in order); older sequences that are
        a prefix of it are dropped, then the least recently used until the total fits."""
        if not self.session_bytes or len(ids) < PREFIX_MIN:
            return
        entry = CachedPrefix(ids, version, layers)
        if entry.nbytes > self.session_bytes:
            return
        for key in [k for k, e in self._finished.items() if e.shared_with(entry.array) == len(e.ids)]:
            self._drop(key)
        while self._finished and self._finished_bytes + entry.nbytes > self.session_bytes:
            self._drop(next(iter(self._finished)))
        self._finished[self._next_key] = entry
        self._next_key += 1
        self._finished_bytes += entry.nbytes
        self.stats["sessions_kept"] += 1

    def _drop(self, key: int) -> None:
        self._finished_bytes -= self._finished.pop(key).nbytes

    def _drop_all(self) -> None:
        self._finished.clear()
        self._finished_bytes = 0

    def _shared(
        self, prompts: list[list[int]], version: int, encode: Callable[[list[int]], Any]
    ) -> CachedPrefix | None:
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
