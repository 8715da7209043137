"""The in-process engine's decode loop: prefill a batch, sample step by step, let rows leave and join.

Rows are left-padded (an attention mask and explicit position ids make the padding invisible, so a
row's result never depends on its batch). Finished rows leave the batch and the KV cache; requests
that arrive meanwhile are prefilled on their own and merged in (``lego.engines.batching``). Each prompt starts from the longest
prefix whose KV is cached (``lego.engines.prefix_cache``: the prefix recent prompts share, or a
finished row's prompt and completion, the previous turn of its session) and only the rest is
prefilled: row layout ``[left pad][cached][left pad][rest]``. A finished row's KV goes to that cache.

Weight swaps mid-batch (a partial rollout, as in AReaL's interruptible generation, Fu et al. 2025,
arXiv:2505.24298): when a swap waits (``scheduler.pausing``), the loop hands it the lock after the
step's tokens are sampled, then re-prefills every running row (its prompt and every token it has
sampled) under the new weights and carries on. The KV the old weights computed is dropped, not
reused: a token sampled after the swap is then exactly a sample of the new weights given the same
context, so its logprob equals teacher forcing under the new weights, and each token records the
version whose logits drew it (``Generation.versions``). Rows finishing at that step resolve before
the swap, on the old version.

Prefill runs in chunks of ``prefill_chunk`` columns through the KV cache: a whole W-token prompt in
one forward builds attention scores and masks of W x W per row (gigabytes at agent prompt lengths,
even for a tiny model), a chunk C x W. The result is the same computation: each query still sees
exactly the keys before it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from lego.engines.batching import Footprint, PendingRequest, can_merge, merge_caches
from lego.engines.guided import Guides
from lego.engines.prefix_cache import PrefixCache
from lego.engines.sampling import RowSampler
from lego.engines.scheduler import BatchScheduler
from lego.types import Generation

__all__ = ["Decoder"]

Prefilled = tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]  # (logits (B, V), mask, next positions, cache)


class Decoder:
    """Runs batches of requests on ``model`` (the worker thread calls :meth:`run` under the lock)."""

    def __init__(
        self,
        model: Any,
        pad_token_id: int,
        eos_token_ids: list[int],
        prefix_cache: PrefixCache,
        version: Callable[[], int],
        stats: dict[str, int],
        prefill_chunk: int | None = None,
        guides: Guides | None = None,
    ) -> None:
        self.model = model
        self.guides = guides
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.eos_token_ids = eos_token_ids
        self.prefix_cache = prefix_cache
        self.version = version
        self.stats = stats
        self.stats.update(generated_tokens=0, joined_mid_batch=0, peak_batch_tokens=0, reprefilled_rows=0)
        self.prefill_chunk = prefill_chunk
        self.cache_kwarg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def _count_slots(self, mask: torch.Tensor) -> None:
        """Record the KV slots a batch holds (rows x padded width): what engine.max_batch_tokens bounds."""
        self.stats["peak_batch_tokens"] = max(self.stats["peak_batch_tokens"], mask.shape[0] * mask.shape[1])

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        self._count_slots(mask)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_kwarg: cache},
        )
        return out.logits[:, -1, :].float()  # (B, V)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        """Run prompt columns ``ids`` (B, W) into ``cache``, ``prefill_chunk`` columns per forward.
        ``mask`` (B, cached + W) covers what ``cache`` already holds too; returns the last logits (B, V)."""
        width, cached = ids.shape[1], mask.shape[1] - ids.shape[1]
        step = self.prefill_chunk or width
        for start in range(0, width, step):
            end = min(width, start + step)
            logits = self.forward(ids[:, start:end], mask[:, : cached + end], positions[:, start:end], cache)
        return logits

    def encode_one(self, ids: list[int]) -> Any:
        """The KV cache of one unpadded prompt (the shared prefix)."""
        from lego.engines.kv import GrowingCache

        cache = GrowingCache()
        tokens = torch.tensor([ids], device=self.device)
        self.encode(tokens, torch.ones_like(tokens), torch.arange(len(ids), device=self.device)[None], cache)
        return cache

    def prefill(self, prompts: list[list[int]]) -> Prefilled:
        """Lay ``prompts`` out as one batch and run them, each after the longest cached prefix it has
        (:meth:`PrefixCache.lookup`). Row layout ``[pad][cached][pad][rest]``: every row's cached
        tokens end in column P and its last prompt token sits in the last column."""
        from lego.engines.kv import GrowingCache

        starts = self.prefix_cache.lookup(prompts, self.version(), self.encode_one)
        cached = [hit[1] if hit else 0 for hit in starts]
        # Never wider than plain left padding (the width admission control counted): a row's cached
        # part ends where the longest rest begins, so long hits are cut when a short one shares the batch.
        width_s = max(len(p) - n for p, n in zip(prompts, cached, strict=True))
        room = max(len(p) for p in prompts) - width_s
        cached = [min(n, room) for n in cached]
        b, width_p = len(prompts), max(cached)
        ids = torch.full((b, width_s), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, width_p + width_s), dtype=torch.long)
        positions = torch.zeros((b, width_s), dtype=torch.long)
        for i, (p, n) in enumerate(zip(prompts, cached, strict=True)):
            rest = len(p) - n
            ids[i, width_s - rest :] = torch.tensor(p[n:])
            mask[i, width_p - n : width_p] = 1
            mask[i, width_p + width_s - rest :] = 1
            positions[i, width_s - rest :] = torch.arange(n, len(p))
        ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
        cache = GrowingCache()
        if width_p:
            hits = [hit for hit in starts if hit]
            for layer in range(len(hits[0][0].layers)):
                like = hits[0][0].layers[layer][0]
                keys = like.new_zeros((b, like.shape[1], width_p, like.shape[3]))
                values = torch.zeros_like(keys)
                for i, (hit, n) in enumerate(zip(starts, cached, strict=True)):
                    if hit and n:
                        k, v = hit[0].layers[layer]
                        keys[i, :, width_p - n :] = k[0, :, :n]
                        values[i, :, width_p - n :] = v[0, :, :n]
                cache.update(keys, values, layer)
            self.stats["prefix_hits"] += sum(1 for n in cached if n)
            self.stats["prefix_tokens_saved"] += sum(cached)
        logits = self.encode(ids, mask, positions, cache)
        return logits, mask, positions[:, -1:] + 1, cache

    def _remember(self, request: PendingRequest, row: int, mask: torch.Tensor, cache: Any, version: int) -> None:
        """Hand a finished row's KV (its real columns: the prompt and every sampled token but the
        last, which was never run) to the prefix cache, for the session's next turn."""
        if not self.prefix_cache.session_bytes:
            return
        columns = mask[row].nonzero()[:, 0]
        ids = request.prompt_ids + request.token_ids[:-1]
        if len(ids) != len(columns):  # the row's columns and tokens disagree: keep nothing rather than wrong KV
            return
        layers = [
            (layer.keys[row : row + 1, :, columns], layer.values[row : row + 1, :, columns])  # copies
            for layer in cache.layers
        ]
        self.prefix_cache.remember(ids, version, layers)

    def _sampler(self, r: PendingRequest) -> RowSampler:
        regex = r.sampling.guided_regex
        guide = self.guides.row(regex, r.max_tokens) if regex is not None and self.guides is not None else None
        return RowSampler(r.sampling, r.seed, self.eos_token_ids, self.device, guide)

    def run(self, batch: list[PendingRequest], scheduler: BatchScheduler) -> None:
        """Decode ``batch`` step by step, resolving each request as soon as it is done."""
        version = self.version()
        dev = self.device
        for r in batch:
            r.started_at = time.perf_counter()
        logits, mask, next_pos, cache = self.prefill([r.prompt_ids for r in batch])
        samplers = [self._sampler(r) for r in batch]
        active = list(range(len(batch)))  # batch rows still generating, in cache order
        while active:
            tokens, logps = RowSampler.sample_rows([samplers[i] for i in active], logits)
            keep: list[int] = []
            for row, (i, tok, lp) in enumerate(zip(active, tokens, logps, strict=True)):
                r = batch[i]
                r.token_ids.append(tok)
                r.logprobs.append(lp)
                r.versions.append(version)
                self.stats["generated_tokens"] += 1
                reason = "stop" if samplers[i].is_stop(tok) else "length" if len(r.token_ids) >= r.max_tokens else None
                if r.future.cancelled():
                    continue  # the caller went away: the row leaves the batch (its slot is free)
                r.emit(tok)
                if reason is None:
                    keep.append(row)
                    continue
                self._remember(r, row, mask, cache, version)
                r.resolve(
                    Generation(
                        token_ids=r.token_ids,
                        logprobs=r.logprobs,
                        finish_reason=reason,
                        policy_version=r.versions[0],
                        versions=r.versions,
                        prompt_tokens=len(r.prompt_ids),
                        engine_time_s=time.perf_counter() - r.started_at,
                        constrained=r.sampling.guided_regex is not None,
                    )
                )
            if not keep:
                break
            if scheduler.pausing:  # a weight swap waits: let it run now, then redo the rows' KV under it
                active = [active[row] for row in keep]
                scheduler.yield_to_pause()
                version = self.version()
                logits, mask, next_pos, cache = self.prefill([batch[i].prompt_ids + batch[i].token_ids for i in active])
                self.stats["reprefilled_rows"] += len(active)
            else:
                step_ids = torch.tensor([[tokens[row]] for row in keep], device=dev)  # (B', 1)
                if len(keep) < len(active):  # drop finished rows from the batch and the KV cache
                    index = torch.tensor(keep, device=dev)
                    cache.batch_select_indices(index)
                    mask, next_pos = mask[index], next_pos[index]
                active = [active[row] for row in keep]
                mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=dev)], dim=-1)
                logits = self.forward(step_ids, mask, next_pos, cache)
                next_pos = next_pos + 1
            if not scheduler.pausing and can_merge(cache):
                left = max(batch[i].max_tokens - len(batch[i].token_ids) for i in active)
                joining = scheduler.take(Footprint(len(active), mask.shape[1], left))
                if joining:
                    for r in joining:
                        r.started_at = time.perf_counter()
                    new_logits, new_mask, new_pos, new_cache = self.prefill([r.prompt_ids for r in joining])
                    width = max(mask.shape[1], new_mask.shape[1])
                    merge_caches(cache, new_cache, width - mask.shape[1], width - new_mask.shape[1])
                    mask = torch.cat(
                        [F.pad(mask, (width - mask.shape[1], 0)), F.pad(new_mask, (width - new_mask.shape[1], 0))]
                    )
                    self._count_slots(mask)  # the merged batch: at least what both halves held apart
                    next_pos = torch.cat([next_pos, new_pos])
                    logits = torch.cat([logits, new_logits])
                    for r in joining:
                        batch.append(r)
                        samplers.append(self._sampler(r))
                        active.append(len(batch) - 1)
                    self.stats["joined_mid_batch"] += len(joining)
                    self.stats["max_batch_size_seen"] = max(self.stats["max_batch_size_seen"], len(active))
