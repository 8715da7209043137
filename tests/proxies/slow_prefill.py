"""``SlowPrefill``: a real engine whose every generation starts late, which is what a long prompt's
prefill looks like to a client (no token for a while, then the tokens as the engine samples them).
Everything else is the wrapped engine's own."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["SlowPrefill"]


class SlowPrefill:
    def __init__(self, real: Any, delay: float) -> None:
        self.real = real
        self.delay = delay
        self.takes_answer = real.takes_answer
        self.max_model_len = real.max_model_len

    @property
    def policy_version(self) -> int:
        return int(self.real.policy_version)

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: Any = None,
    ) -> Generation:
        await asyncio.sleep(self.delay)
        return await self.real.generate(prompt_ids, sampling, context, on_tokens=on_tokens)

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return list(await self.real.score(sequences, prompt_lens, temperature))

    def load_weights(self, state_dict: Mapping[str, Any]) -> int:
        return int(self.real.load_weights(state_dict))

    async def close(self) -> None:
        await self.real.close()
