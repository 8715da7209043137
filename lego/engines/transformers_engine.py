"""The in-process engine: a transformers causal LM behind a batching queue, CPU or CUDA.

Concurrency model: ``generate`` is async and may be awaited by many tasks at once. Each call puts
a request on a queue; one worker thread takes up to ``max_batch_size`` waiting requests, runs them
together (left padding, an attention mask and explicit position ids so padding never changes a
row's result; a KV cache) and resolves each request's future as soon as it is done. Finished rows
leave the batch and its KV cache; requests arriving mid-batch are prefilled and join it (their
cache left-padded to the batch's length), so a short request never waits for a long one. A weight
swap takes effect between two decode steps, also for generations in flight: their rows are
re-prefilled under the new weights and carry on, and every token records the policy version that
sampled it (``Generation.versions``), so a generation that spans the swap carries its boundary.

Memory: admission control (``max_batch_tokens``) bounds the KV slots a batch may reach, padding
included (rows x (padded width + the most tokens a row may still generate)); requests beyond it
queue in arrival order, so N concurrent long prompts run a few at a time instead of running out of
memory. Prompts are prefilled ``prefill_chunk_tokens`` columns per forward, so no forward builds a
prompt-length-squared attention matrix. Neither changes a row's tokens or logprobs.

Shared-prefix cache (``prefix_cache=True``): every request of an agent starts with the same system
prompt and tool schemas (659 tokens for lego-agent, most of a turn's prompt). The engine keeps the
longest common prefix of its recent prompts with its KV (computed once per ``policy_version``), and
the KV of finished requests (``session_cache_mb``): a session's next turn extends its previous prompt
and completion, so it prefills only what the harness appended. Each row starts after its longest
cached prefix: row layout ``[left pad][cached][left pad][rest]``, with the attention mask and explicit
position ids making the padding invisible, as in the plain path.

What the logprobs mean, exactly: for each sampled token, ``log_softmax(logits / T)[token]`` where
``logits`` are the model's raw fp32 logits and ``T`` the request's temperature, computed BEFORE
top-k / top-p truncation (truncation only decides which tokens may be drawn). For ``T == 0``
(greedy) the logprob is taken at temperature 1. The sampler is lego's own loop, not
``model.generate()``, which would silently apply top_k=50 unless told top_k=0.

Guided decoding (``SamplingParams.guided_regex``, a forced tool call): the row samples only tokens
that keep its text inside the regex and inside ``max_tokens``, and ends when the match is complete;
its Generation is flagged ``constrained`` (``guided``).

Where each concern lives: ``scheduler`` (queue, worker thread, pausing for weight swaps),
``decode`` (prefill, the decode loop, rows joining and leaving), ``prefix_cache`` (the shared-prefix
KV), ``batching`` (pending requests, KV merging), ``sampling`` (per-row sampling), ``guided``
(constrained decoding), ``scoring``
(teacher-forced logprobs); this module loads the model and copies weights in.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from lego.config import EngineConfig
from lego.engines.batching import PendingRequest
from lego.engines.decode import Decoder
from lego.engines.guided import Guides
from lego.engines.prefix_cache import PrefixCache
from lego.engines.scheduler import BatchScheduler
from lego.engines.scoring import teacher_forced_logprobs
from lego.errors import ContextOverflowError, EngineError, EngineUnavailableError, ModelError
from lego.seams import EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["TransformersEngine"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _refuse_unsupported(path: Path) -> None:
    """A ModelError before any weight is read when the config names an architecture the engine cannot run."""
    import json

    from lego.models.check import unsupported_architecture

    config = path / "config.json"
    if config.is_file():
        why = unsupported_architecture(json.loads(config.read_text(encoding="utf-8")))
        if why is not None:
            raise ModelError(why)


class TransformersEngine:
    """Serve a Hugging Face causal LM in this process (see the module docstring for semantics).

    On CPU the constructor sets torch's intra-op threads (process-wide) to ``num_threads``,
    default half the cores. ``model`` is the live ``torch.nn.Module``: an in-process trainer may share its tensors, in
    which case it must update them inside ``with engine.paused():`` and then call
    ``load_weights({})`` to bump ``policy_version`` (tokens sampled between the two are labelled
    with the old version; :meth:`load_weights` with the changed tensors swaps and labels in one
    pause). Its capability beyond the Engine seam: in-process weights (:meth:`load_weights`).
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
        session_cache_mb: int = 256,
        max_batch_tokens: int | None = 65536,
        prefill_chunk_tokens: int | None = 512,
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
        _refuse_unsupported(path)
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
        eos_token_ids = self._eos_ids(path, GenerationConfig)
        self.pad_token_id = int(getattr(self.model.config, "pad_token_id", None) or eos_token_ids[0])
        self._closed = False
        self._request_counter = 0
        self.stats: dict[str, int] = {}
        self.prefix_cache = PrefixCache(prefix_cache, self.stats, session_cache_mb << 20)
        self.decoder = Decoder(
            self.model,
            self.pad_token_id,
            eos_token_ids,
            self.prefix_cache,
            lambda: self.policy_version,
            self.stats,
            prefill_chunk=prefill_chunk_tokens,
            guides=Guides(self._tokenizer, int(self.model.config.vocab_size), lambda: list(self.decoder.eos_token_ids)),
        )
        self.scheduler = BatchScheduler(
            lambda batch: self.decoder.run(batch, self.scheduler), max_batch_size, self.stats, max_batch_tokens
        )
        self._smoke_test()

    def _smoke_test(self) -> None:
        """A two-token prefill and one decode step through the engine's own KV cache, at start-up: an
        architecture it cannot run fails here, named, instead of on every request later."""
        dev, pad = self.device, self.pad_token_id
        try:
            with torch.no_grad():
                cache = self.decoder.encode_one([pad, pad])
                mask = torch.ones((1, 3), dtype=torch.long, device=dev)
                self.decoder.forward(torch.tensor([[pad]], device=dev), mask, torch.tensor([[2]], device=dev), cache)
        except Exception as exc:  # whatever the model's code raises: the architecture is the problem
            arch = ",".join(getattr(self.model.config, "architectures", None) or [type(self.model).__name__])
            raise ModelError(
                f"lego's in-process engine cannot run {arch} ({type(exc).__name__}: {exc}); serve it with vLLM "
                "(`vllm serve MODEL`, then -o engine.kind=vllm -o engine.vllm_url=URL)"
            ) from exc
        self.stats["peak_batch_tokens"] = 0

    def _tokenizer(self) -> Any:
        """The model directory's tokenizer (for guided decoding's token texts; loaded on first use)."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.model_path))

    @property
    def eos_token_ids(self) -> list[int]:
        """The ids that end a generation (the decoder's: setting them here changes what it stops on)."""
        return self.decoder.eos_token_ids

    @eos_token_ids.setter
    def eos_token_ids(self, ids: list[int]) -> None:
        self.decoder.eos_token_ids = ids

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
            session_cache_mb=cfg.session_cache_mb,
            max_batch_tokens=cfg.max_batch_tokens,
            prefill_chunk_tokens=cfg.prefill_chunk_tokens,
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
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        """Sample up to ``sampling.max_tokens`` tokens after ``prompt_ids``.

        ``on_tokens`` receives each id as the batch loop samples it (on this call's event loop).
        Cancelling the call drops its row from the running batch at the next step.

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
            on_tokens=on_tokens,
        )
        self.scheduler.submit(request)
        return await request.future

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Teacher-forced ``log_softmax(logits / T)`` of each token after its prompt (T=0 scores at 1)."""
        return await asyncio.to_thread(self.score_sync, sequences, prompt_lens, temperature)

    def score_sync(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Blocking ``score``: right-padded batches of ``max_batch_size``, run between generation batches."""
        with self.scheduler.lock:
            return teacher_forced_logprobs(
                self.model,
                sequences,
                prompt_lens,
                temperature,
                pad_token_id=self.pad_token_id,
                batch_size=self.max_batch_size,
                max_model_len=self.max_model_len,
            )

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(in_process_weights=self)

    def load_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Copy ``state_dict`` into the model between two decode steps and bump ``policy_version``.

        Generations in flight continue on the new weights (their KV recomputed, see
        ``lego.engines.decode``); their later tokens carry the new version. Keys may be a subset (e.g. only the trained layers); an unknown key is an error. An empty
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
        """Hold generation (e.g. while a trainer edits ``model`` in place).

        The running batch stops taking in new requests and stops at its next decode step; the caller
        then holds the lock. When the block ends, running rows are re-prefilled on the weights as
        they are then and continue.
        """
        with self.scheduler.paused():
            yield

    async def close(self) -> None:
        """Finish the current batch, fail queued requests with EngineUnavailableError, stop the worker."""
        self._closed = True
        worker = self.scheduler.close()
        if worker is not None:
            await asyncio.to_thread(worker.join)
