"""``ScriptedEngine``: the one test double of the Engine seam, shipped beside it.

A randomly initialised model never writes a tool call, so a test that drives a conversation through
the proxy (or a harness through a sandbox) scripts the policy's turns: the engine plays chosen
completions -- text, rendered to ids with the chat format, or ids as they are -- and takes each
token's logprob from a real engine by teacher forcing, so every recorded logprob is still real::

    engine = ScriptedEngine(TransformersEngine(tiny_dir), chat_format)
    engine.push('<tool_call>\\n{"name": "bash", ...}\\n</tool_call><|im_end|>', "Done.<|im_end|>")
    with ProxyServer(engine, chat_format, ProxyConfig(port=0)) as srv: ...

When the script is used up it plays ``idle`` (default ``ok<|im_end|>``: no tool call, so a harness
asks again); ``idle=None`` lets the real engine sample instead. A completion is cut at the call's
``max_tokens`` like a sampled one; its finish reason is ``stop`` when it ends in an end-of-sequence
id, else ``length``. ``stream=True`` hands a stream its ids one at a time, as a sampling engine does
(the proxy's token-by-token path runs); otherwise all at once when the completion is decided.
``delay`` makes each call wait first (to test cancellation); ``prompts`` records each prompt served.

A test that needs more (routing scripts by session, an engine that goes down) subclasses it and
overrides :meth:`next_completion` or :meth:`generate`. It has no capability beyond the seam (it
loads no weights and takes no answer).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from lego.seams import Engine, EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["IDLE", "Completion", "ScriptedEngine"]

IDLE = "ok<|im_end|>"
"""What the engine plays once its script is used up, unless told otherwise."""

Completion = str | list[int]
"""One scripted completion: text (rendered to ids with the chat format) or the ids themselves."""


class TextEncoder(Protocol):
    """What the engine needs of a chat format: text to ids, and which ids end a sequence."""

    eos_token_ids: list[int]

    def encode(self, text: str) -> list[int]: ...


class ScriptedEngine:
    """An :class:`~lego.seams.Engine` that plays scripted completions with logprobs from ``scorer``
    (see the module docstring)."""

    capabilities = EngineCapabilities()

    def __init__(
        self, scorer: Engine, chat_format: TextEncoder, *, idle: str | None = IDLE, stream: bool = False
    ) -> None:
        self.real = scorer
        self.chat = chat_format
        self.idle = idle
        self.stream = stream
        self.script: list[Completion] = []
        self.prompts: list[list[int]] = []
        self.policy_version = 0
        self.max_model_len = scorer.max_model_len
        self.delay = 0.0

    def push(self, *completions: Completion) -> None:
        """Append ``completions`` to the script, played one per call in order."""
        self.script.extend(completions)

    def next_completion(self, context: RequestContext | None, sampling: SamplingParams) -> Completion | None:
        """What this call plays: the script's next completion, else ``idle``; None: the real engine samples."""
        return self.script.pop(0) if self.script else self.idle

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        if self.delay:
            await asyncio.sleep(self.delay)
        planned = self.next_completion(context, sampling)
        self.prompts.append(list(prompt_ids))
        if planned is None:
            return await self.real.generate(prompt_ids, sampling, context, on_tokens)
        ids = self.chat.encode(planned) if isinstance(planned, str) else list(planned)
        ids = ids[: sampling.max_tokens]
        (lps,) = await self.real.score([list(prompt_ids) + ids], [len(prompt_ids)], sampling.temperature or 1.0)
        if on_tokens is not None and ids:
            for run in [[tok] for tok in ids] if self.stream else [ids]:
                on_tokens(list(run))
        return Generation(
            token_ids=ids,
            logprobs=list(lps),
            finish_reason="stop" if ids and ids[-1] in self.chat.eos_token_ids else "length",
            policy_version=self.policy_version,
            prompt_tokens=len(prompt_ids),
        )

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return list(await self.real.score(sequences, prompt_lens, temperature))

    async def close(self) -> None:
        """Nothing to close: the scoring engine belongs to whoever built it."""
        return None
