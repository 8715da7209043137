"""How busy an engine is: the wall time during which at least one generation is in flight.

:class:`MeteredEngine` wraps any :class:`~lego.seams.Engine` and forwards every call unchanged; it
only counts. ``busy_s`` is the union of the intervals in which one or more ``generate`` calls were
running (queued in the engine's batch counts: the engine has work), so ``busy_s / wall`` is the
fraction of the time the engine had something to generate — the figure asynchronous training
exists to raise (``lego bench async``: the synchronous loop leaves the engine idle while the
trainer updates and while the slowest rollout's harness, sandbox and grading run). It measures
from the caller's side, so it means the same for the in-process engine and for a vLLM server.
"""

from __future__ import annotations

import threading
import time

from lego.seams import Engine, EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["MeteredEngine"]


class MeteredEngine:
    """``engine`` with a busy-time meter (module doc). The wrapped engine stays reachable as ``inner``."""

    def __init__(self, engine: Engine) -> None:
        self.inner = engine
        self._lock = threading.Lock()
        self._running = 0
        self._since = 0.0
        self._busy = 0.0

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.inner.capabilities

    @property
    def busy_s(self) -> float:
        """Seconds so far with at least one generation in flight (the current stretch included)."""
        with self._lock:
            return self._busy + (time.monotonic() - self._since if self._running else 0.0)

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        with self._lock:
            if self._running == 0:
                self._since = time.monotonic()
            self._running += 1
        try:
            return await self.inner.generate(prompt_ids, sampling, context, on_tokens)
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self._busy += time.monotonic() - self._since

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return await self.inner.score(sequences, prompt_lens, temperature)

    async def close(self) -> None:
        await self.inner.close()
