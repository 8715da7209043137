"""The in-process engine: a transformers causal LM behind a batching queue, CPU or CUDA.

Concurrency model: ``generate`` is async and may be awaited by many tasks at once. Each call puts
a request on a queue; one worker thread takes up to ``max_batch_size`` waiting requests, runs them
together (left padding, an attention mask and explicit position ids so padding never changes a
row's result; a KV cache) and resolves each request's future as soon as it is done. Finished rows
leave the batch and its KV cache; requests arriving mid-batch are prefilled and join it (their
cache left-padded to the batch's length), so a short request never waits for a long one. A weight
swap stops admissions; the batch drains and the swap happens between batches.

Shared-prefix cache (``prefix_cache=True``): every request of an agent starts with the same system
prompt and tool schemas (659 tokens for lego-agent, most of a turn's prompt). The engine keeps the
longest common prefix of its recent prompts with its KV (computed once per ``policy_version``), and a
batch whose prompts all extend it prefills only the rest: row layout ``[prefix][left pad][suffix]``,
with the attention mask and explicit position ids making the padding invisible, as in the plain path.

What the logprobs mean, exactly: for each sampled token, ``log_softmax(logits / T)[token]`` where
``logits`` are the model's raw fp32 logits and ``T`` the request's temperature, computed BEFORE
top-k / top-p truncation (truncation only decides which tokens may be drawn). For ``T == 0``
(greedy) the logprob is taken at temperature 1. The sampler is lego's own loop, not
``model.generate()``, which would silently apply top_k=50 unless told top_k=0.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lego.config import EngineConfig
from lego.engines.batching import PendingRequest, can_merge, merge_caches
from lego.engines.sampling import RowSampler
from lego.errors import ContextOverflowError, EngineError, EngineUnavailableError, ModelError
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["TransformersEngine"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PREFIX_WINDOW = 8  # prompts whose common prefix is cached
_PREFIX_MIN = 64  # tokens: a shorter common prefix is not worth a cache


class _Prefix:
    """The KV of ``ids`` under the weights of ``version``: one (keys, values) pair per layer, batch 1."""

    def __init__(self, ids: list[int], version: int, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.ids, self.version, self.layers = ids, version, layers

    def fits(self, prompt: list[int]) -> bool:
        return len(prompt) > len(self.ids) and prompt[: len(self.ids)] == self.ids


def _common_prefix(prompts: list[list[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        tok = first[i]
        if any(p[i] != tok for p in prompts[1:]):
            return i
    return n


class TransformersEngine:
    """Serve a Hugging Face causal LM in this process (see the module docstring for semantics).

    On CPU the constructor sets torch's intra-op threads (process-wide) to ``num_threads``,
    default half the cores. ``model`` is the live ``torch.nn.Module``: an in-process trainer may share its tensors, in
    which case it must update them inside ``with engine.paused():`` and then call
    ``load_weights({})`` to bump ``policy_version``.
    """

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: str | torch.dtype | None = None,
        max_batch_size: int = 16,
        max_model_len: int | None = None,
        seed: int = 0,
        num_threads: int | None = None,
        prefix_cache: bool = True,
    ) -> None:
        from transformers import AutoModelForCausalLM, GenerationConfig

        from lego.models.tiny import resolve_model

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ModelError("device 'cuda' was asked for but torch sees no CUDA GPU; use device='cpu' or 'auto'")
        if dtype in (None, "auto"):
            torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        else:
            torch_dtype = dtype if isinstance(dtype, torch.dtype) else _DTYPES[dtype]
        if not device.startswith("cuda"):
            # torch's default (one intra-op thread per core) collapses when the harnesses, sandboxes
            # and trainer compete for the same cores: a 2-core box ran 18x slower per step at 2
            # threads under load than at 1. Half the cores is the default; pass num_threads to override.
            torch.set_num_threads(num_threads or max(1, (os.cpu_count() or 2) // 2))
        path = resolve_model(model_path)
        try:
            model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load a causal LM from {path}: {exc}") from exc
        self.model: Any = model.to(device).eval()
        self.model_path = path
        self.device = torch.device(device)
        self.dtype = torch_dtype
        self.max_batch_size = max_batch_size
        own_len: int = getattr(self.model.config, "max_position_embeddings", None) or 32768
        self.max_model_len: int = max_model_len or own_len
        self.seed = seed
        self.policy_version = 0
        self.eos_token_ids = self._eos_ids(path, GenerationConfig)
        self.pad_token_id = int(getattr(self.model.config, "pad_token_id", None) or self.eos_token_ids[0])
        self._cache_kwarg = (
            "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        )
        self._queue: queue.Queue[PendingRequest | None] = queue.Queue()
        self._lock = threading.Lock()  # held by the worker for a whole batch; weight swaps wait for it
        self._worker: threading.Thread | None = None
        self._closed = False
        self._request_counter = 0
        self.stats: dict[str, int] = {
            "batches": 0,
            "max_batch_size_seen": 0,
            "generated_tokens": 0,
            "joined_mid_batch": 0,
        }
        self._pause_lock = threading.Lock()
        self._pause_requests = 0  # > 0 while load_weights/paused() wait: the running batch stops admitting
        self.prefix_cache = prefix_cache
        self._recent: deque[list[int]] = deque(maxlen=_PREFIX_WINDOW)  # recent prompts (worker thread only)
        self._prefix: _Prefix | None = None
        self.stats.update(prefix_hits=0, prefix_builds=0, prefix_tokens_saved=0)

    @classmethod
    def from_config(cls, cfg: EngineConfig) -> TransformersEngine:
        return cls(
            cfg.model,
            device=cfg.device,
            dtype=None if cfg.dtype == "auto" else cfg.dtype,
            max_batch_size=cfg.max_batch_size,
            max_model_len=cfg.max_model_len,
            seed=cfg.seed,
            num_threads=cfg.num_threads,
            prefix_cache=cfg.prefix_cache,
        )

    def _eos_ids(self, path: Path, generation_config_cls: Any) -> list[int]:
        ids: list[int] = []
        sources: list[Any] = [getattr(self.model.config, "eos_token_id", None)]
        try:
            sources.insert(0, generation_config_cls.from_pretrained(str(path)).eos_token_id)
        except OSError:
            pass  # no generation_config.json: the model config's eos is all there is
        for src in sources:
            for tid in [src] if isinstance(src, int) else list(src or []):
                if int(tid) not in ids:
                    ids.append(int(tid))
        if not ids:
            raise ModelError(f"{path} names no eos_token_id in config.json or generation_config.json")
        return ids

    # ---- public API -------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        """Sample up to ``sampling.max_tokens`` tokens after ``prompt_ids``.

        ``max_tokens`` is clamped to the room left in the context window; ContextOverflowError is
        raised only when there is no room for even one token (``len(prompt) + 1 > max_model_len``).
        Stops on an eos id or a ``stop_token_ids`` id (included in ``token_ids``, finish_reason
        "stop") or at the token limit ("length"). ``logprobs[i]`` is
        ``log_softmax(raw_logits / temperature)[token_ids[i]]`` before top-k/top-p truncation
        (temperature 1 when greedy).
        """
        if self._closed:
            raise EngineUnavailableError("the engine is closed; create a new one")
        if not prompt_ids:
            raise EngineError("empty prompt: render at least one message before generating")
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ContextOverflowError(len(prompt_ids), sampling.max_tokens, self.max_model_len)
        self._request_counter += 1
        seed = sampling.seed if sampling.seed is not None else self.seed * 1_000_003 + self._request_counter
        loop = asyncio.get_running_loop()
        request = PendingRequest(
            prompt_ids=list(prompt_ids),
            sampling=sampling,
            max_tokens=min(sampling.max_tokens, room),
            seed=seed,
            loop=loop,
            future=loop.create_future(),
        )
        self._ensure_worker()
        self._queue.put(request)
        return await request.future

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Teacher-forced ``log_softmax(logits / T)`` of each token after its prompt (T=0 scores at 1)."""
        return await asyncio.to_thread(self.score_sync, sequences, prompt_lens, temperature)

    def score_sync(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Blocking ``score``: right-padded batches of ``max_batch_size``, run between generation batches."""
        if len(sequences) != len(prompt_lens):
            raise EngineError(f"{len(sequences)} sequences but {len(prompt_lens)} prompt lengths")
        for s, p in zip(sequences, prompt_lens, strict=True):
            if len(s) > self.max_model_len:
                raise ContextOverflowError(p, len(s) - p, self.max_model_len)
        t = temperature if temperature > 0 else 1.0
        out: list[list[float]] = []
        with self._lock, torch.no_grad():
            for start in range(0, len(sequences), self.max_batch_size):
                chunk = sequences[start : start + self.max_batch_size]
                lens = prompt_lens[start : start + self.max_batch_size]
                width = max(len(s) for s in chunk)
                ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, s in enumerate(chunk):
                    ids[i, : len(s)] = torch.tensor(s)
                    mask[i, : len(s)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                logp = torch.log_softmax(logits.float() / t, dim=-1)  # (B, T, V)
                for i, (s, p) in enumerate(zip(chunk, lens, strict=True)):
                    if not 1 <= p <= len(s):
                        raise EngineError(f"prompt_len {p} is outside sequence {start + i} of length {len(s)}")
                    target = torch.tensor(s[p:], device=self.device)
                    out.append(logp[i, p - 1 : len(s) - 1].gather(-1, target[:, None])[:, 0].tolist())
        return out

    def load_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Copy ``state_dict`` into the model between batches and bump ``policy_version``.

        Keys may be a subset (e.g. only the trained layers); an unknown key is an error. An empty
        mapping only bumps the version (for a trainer that updated ``model`` in place).
        """
        # state_dict() names tied weights under every alias (lm_head.weight and the embedding),
        # named_parameters() only once: accept both, the copy lands in the shared tensor either way.
        params = dict(self.model.state_dict(keep_vars=True))
        params.update(dict(self.model.named_parameters()))
        params.update(dict(self.model.named_buffers()))
        unknown = [k for k in state_dict if k not in params]
        if unknown:
            raise EngineError(
                f"load_weights: {len(unknown)} keys are not in the model, e.g. {unknown[:3]}; "
                "pass the policy's own state_dict (merge LoRA adapters first)"
            )
        with self.paused(), torch.no_grad():
            for key, value in state_dict.items():
                params[key].copy_(torch.as_tensor(value))
            self.policy_version += 1
            return self.policy_version

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold generation between batches (e.g. while a trainer edits ``model`` in place).

        The running batch stops taking in new requests, finishes, and then the caller holds the lock.
        """
        with self._pause_lock:
            self._pause_requests += 1
        try:
            with self._lock:
                yield
        finally:
            with self._pause_lock:
                self._pause_requests -= 1

    async def close(self) -> None:
        """Finish the current batch, fail queued requests with EngineUnavailableError, stop the worker."""
        self._closed = True
        worker = self._worker
        self._queue.put(None)
        if worker is not None:
            await asyncio.to_thread(worker.join)

    # ---- worker --------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="lego-transformers-engine", daemon=True)
            self._worker.start()

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
            with self._lock, torch.no_grad():
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
                        self._generate_batch(batch)
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

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        kwargs = {self._cache_kwarg: cache}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **kwargs
        )
        return out.logits[:, -1, :].float()  # (B, V)

    def _shared_prefix(self, requests: list[PendingRequest]) -> _Prefix | None:
        """The cached prefix every prompt of ``requests`` extends, (re)built when the weights changed or
        the recent prompts share a different one; None when there is none worth using."""
        for r in requests:
            self._recent.append(r.prompt_ids)
        if not self.prefix_cache or len(self._recent) < 2:
            return None
        prefix = self._prefix
        if prefix is None or not all(prefix.fits(r.prompt_ids) for r in requests):
            n = _common_prefix(list(self._recent))
            if n < _PREFIX_MIN:
                return None
            ids = list(self._recent[0][:n])
            if not all(len(r.prompt_ids) > n and r.prompt_ids[:n] == ids for r in requests):
                return None
            prefix = _Prefix(ids, -1, [])
        if prefix.version != self.policy_version:
            from transformers import DynamicCache

            cache = DynamicCache()
            ids_t = torch.tensor([prefix.ids], device=self.device)
            self.model(input_ids=ids_t, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache})
            cached: Any = cache.layers
            layers = [(layer.keys.clone(), layer.values.clone()) for layer in cached]
            prefix = _Prefix(prefix.ids, self.policy_version, layers)
            self.stats["prefix_builds"] += 1
        self._prefix = prefix
        return prefix

    def _prefill(self, requests: list[PendingRequest]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """Left-pad ``requests`` into one batch and run the prompt: (logits, mask, next_pos, cache)."""
        from transformers import DynamicCache

        prefix = self._shared_prefix(requests)
        if prefix is not None:
            return self._prefill_after(prefix, requests)
        dev = self.device
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):  # left padding: every row's last prompt token sits in the last column
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        ids, mask, positions = ids.to(dev), mask.to(dev), positions.to(dev)
        cache = DynamicCache()
        logits = self._forward(ids, mask, positions, cache)  # (B, V)
        return logits, mask, positions[:, -1:] + 1, cache

    def _prefill_after(
        self, prefix: _Prefix, requests: list[PendingRequest]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """``_prefill`` for prompts that all extend ``prefix``: only the suffixes run through the model."""
        from transformers import DynamicCache

        dev, n, b = self.device, len(prefix.ids), len(requests)
        suffixes = [r.prompt_ids[n:] for r in requests]
        width = max(len(s) for s in suffixes)
        ids = torch.full((b, width), self.pad_token_id, dtype=torch.long)
        tail = torch.zeros((b, width), dtype=torch.long)
        for i, suffix in enumerate(suffixes):
            ids[i, width - len(suffix) :] = torch.tensor(suffix)
            tail[i, width - len(suffix) :] = 1
        positions = (n + tail.cumsum(-1) - 1).clamp(min=n)
        mask = torch.cat([torch.ones((b, n), dtype=torch.long), tail], dim=-1)
        ids, mask, positions = ids.to(dev), mask.to(dev), positions.to(dev)
        cache = DynamicCache()
        for layer, (keys, values) in enumerate(prefix.layers):
            cache.update(keys.expand(b, -1, -1, -1).contiguous(), values.expand(b, -1, -1, -1).contiguous(), layer)
        logits = self._forward(ids, mask, positions, cache)
        self.stats["prefix_hits"] += b
        self.stats["prefix_tokens_saved"] += b * n
        return logits, mask, positions[:, -1:] + 1, cache

    def _take_waiting(self, limit: int) -> list[PendingRequest]:
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

    def _generate_batch(self, batch: list[PendingRequest]) -> None:
        """Decode ``batch`` step by step. Finished rows leave the batch (and the KV cache); requests
        that arrive meanwhile join it after their own prefill (their cache is left-padded to the
        batch's length), unless a weight swap is waiting: then the batch drains and ends."""
        version = self.policy_version
        dev = self.device
        for r in batch:
            r.started_at = time.perf_counter()
        logits, mask, next_pos, cache = self._prefill(batch)
        samplers = [RowSampler(r.sampling, r.seed, self.eos_token_ids, dev) for r in batch]
        active = list(range(len(batch)))  # batch rows still generating, in cache order
        while active:
            tokens, logps = RowSampler.sample_rows([samplers[i] for i in active], logits)
            keep: list[int] = []
            for row, (i, tok, lp) in enumerate(zip(active, tokens, logps, strict=True)):
                r = batch[i]
                r.token_ids.append(tok)
                r.logprobs.append(lp)
                self.stats["generated_tokens"] += 1
                reason = "stop" if samplers[i].is_stop(tok) else "length" if len(r.token_ids) >= r.max_tokens else None
                if r.future.cancelled():
                    continue
                if reason is None:
                    keep.append(row)
                    continue
                r.resolve(
                    Generation(
                        token_ids=r.token_ids,
                        logprobs=r.logprobs,
                        finish_reason=reason,
                        policy_version=version,
                        prompt_tokens=len(r.prompt_ids),
                        engine_time_s=time.perf_counter() - r.started_at,
                    )
                )
            if not keep:
                break
            step_ids = torch.tensor([[tokens[row]] for row in keep], device=dev)  # (B', 1)
            if len(keep) < len(active):  # drop finished rows from the batch and the KV cache
                index = torch.tensor(keep, device=dev)
                cache.batch_select_indices(index)
                mask, next_pos = mask[index], next_pos[index]
            active = [active[row] for row in keep]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=dev)], dim=-1)
            logits = self._forward(step_ids, mask, next_pos, cache)
            next_pos = next_pos + 1
            room = self.max_batch_size - len(active)
            if room > 0 and not self._pause_requests and can_merge(cache):
                joining = self._take_waiting(room)
                if joining:
                    for r in joining:
                        r.started_at = time.perf_counter()
                    new_logits, new_mask, new_pos, new_cache = self._prefill(joining)
                    width = max(mask.shape[1], new_mask.shape[1])
                    merge_caches(cache, new_cache, width - mask.shape[1], width - new_mask.shape[1])
                    mask = torch.cat(
                        [F.pad(mask, (width - mask.shape[1], 0)), F.pad(new_mask, (width - new_mask.shape[1], 0))]
                    )
                    next_pos = torch.cat([next_pos, new_pos])
                    logits = torch.cat([logits, new_logits])
                    for r in joining:
                        batch.append(r)
                        samplers.append(RowSampler(r.sampling, r.seed, self.eos_token_ids, dev))
                        active.append(len(batch) - 1)
                    self.stats["joined_mid_batch"] += len(joining)
                    self.stats["max_batch_size_seen"] = max(self.stats["max_batch_size_seen"], len(active))
