"""``SlowPrefill``: a real engine whose every generation starts late, which is what a long prompt's
prefill looks like to a client (no token for a while, then the tokens as the engine samples them).
Everything else is the wrapped engine's own, its capabilities too."""

from __future__ import annotations

import asyncio

from lego.seams import Engine, EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["SlowPrefill"]


class SlowPrefill:
    def __init__(self, real: Engine, delay: float) -> None:
        self.real = real
        self.delay = delay
        self.max_model_len = real.max_model_len

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.real.capabilities

    @property
    def policy_version(self) -> int:
        return self.real.policy_version

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        await asyncio.sleep(self.delay)
        return await self.real.generate(prompt_ids, sampling, context, on_tokens=on_tokens)

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return list(await self.real.score(sequences, prompt_lens, temperature))

    async def close(self) -> None:
        await self.real.close()
