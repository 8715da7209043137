"""The Engine seam: token ids in, sampled token ids and their logprobs out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["Engine", "TokenSink"]

TokenSink = Callable[[list[int]], None]
"""Called on the caller's event loop with each run of newly sampled ids, in order, as they are
sampled; their concatenation is the finished Generation's ``token_ids``."""


@runtime_checkable
class Engine(Protocol):
    """Serves a policy. ``generate`` is async and may be called many times concurrently.

    ``policy_version`` increases by one each time new weights are loaded; every Generation records
    the version that produced it.
    """

    policy_version: int
    max_model_len: int
    takes_answer: bool
    """True only for an engine that plays the task's answer (the oracle): the proxy gives a session's
    gold patch (``RequestContext.answer``) to such an engine and refuses it for every other."""

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        """Sample a continuation of ``prompt_ids``.

        ``on_tokens`` (optional) streams: it receives the sampled ids as they are generated, before
        the returned Generation (which holds them all). Cancelling the call stops the generation.
        Raises ContextOverflowError if the prompt does not fit, EngineError on failure.
        """
        ...

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Logprob of each token after its prompt (teacher forcing), at ``temperature``."""
        ...

    def load_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Load new policy weights; returns the new policy version."""
        ...

    async def close(self) -> None: ...
