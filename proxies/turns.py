"""The proxy's hook for whoever keeps completed turns (``lego serve``'s store): a record and a Protocol.

The proxy itself keeps nothing on disk. A :class:`TurnSink` handed to
:class:`~lego.proxies.service.ProxyService` is awaited once per completed generation, after the
recorder committed it and *before* the reply is returned (a stream's closing event included), so a
sink that writes durably makes "the client saw the whole reply" imply "the turn is stored". A sink
that raises turns the call into a 503 the client sees: a turn is never acknowledged unstored.

The control face's ``POST /s/{session}/feedback`` hands the body (:class:`FeedbackBody`) to the same
sink, and ``POST /s/{session}/said`` (:class:`SaidBody`: a message the person's side is about to
send their harness, recorded so their words can be told from user-role text anything else put in a
request). Both live here so the proxy need not import what implements them (lego.learn imports this).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CompletedTurn", "FeedbackBody", "SaidBody", "TurnSink"]


@dataclass(frozen=True)
class CompletedTurn:
    """One served generation as the policy saw and wrote it.

    ``prompt_ids``: the engine's prompt (the chat template's render of ``messages`` and ``tools``,
    forced tool-call openings included); ``output_ids`` / ``logprobs``: what the policy sampled, each
    token's logprob; ``reply``: the assistant message the client got (OpenAI chat shape)."""

    session_id: str
    thread: str
    main: bool
    api: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply: dict[str, Any]
    reasoning: str
    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    policy_version: int
    constrained: bool
    """Decoded under a forced tool call's grammar: not drawn from the policy, never trained on."""
    versions: list[int] = field(default_factory=list)
    """The policy version that sampled each output token (steps up where a weight swap took over mid-reply)."""
    temperature: float | None = None
    """The temperature the turn was sampled at (its logprobs are the policy's at that temperature)."""
    top_p: float | None = None
    top_k: int | None = None
    """The truncation it was sampled under (1.0 and 0: none): a truncated draw is not the policy's distribution."""


class FeedbackBody(BaseModel):
    """``POST /s/{session}/feedback``: a person's verdict on a turn (the session's last one if ``turn`` is None)."""

    model_config = ConfigDict(extra="forbid")

    score: Literal[-1, 1]
    turn: int | None = Field(None, ge=0)
    text: str = ""


class SaidBody(BaseModel):
    """``POST /s/{session}/said``: a message the person sends their harness, reported by their side first."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)


class TurnSink(Protocol):
    """Keeps completed turns and feedback (see the module docstring). ``session_key`` is the key the
    harness sent (the session's token): never written, and redacted wherever it is echoed."""

    async def turn_completed(self, turn: CompletedTurn, session_key: str) -> None: ...

    async def feedback(self, session_id: str, body: FeedbackBody) -> dict[str, Any]: ...

    async def said(self, session_id: str, body: SaidBody) -> dict[str, Any]: ...
