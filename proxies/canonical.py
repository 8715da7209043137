"""A model call in canonical form, whatever API it came through.

Every route converts its request into a :class:`ChatRequest` (OpenAI-style chat messages and
tools), :meth:`lego.proxies.service.ProxyService.complete` answers it with a :class:`ChatResult`,
and the route converts that back into its API's shape. :class:`ChatFormatLike` is what the proxy
needs of the model's chat format.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from lego.models.tool_parsers import ParsedCompletion
from lego.proxies.recorder import ChatTemplate

__all__ = ["ChatFormatLike", "ChatRequest", "ChatResult", "Message"]

Message = dict[str, Any]


class ChatFormatLike(ChatTemplate, Protocol):
    """The chat format the proxy needs: the recorder's template plus completion parsing."""

    def parse(
        self,
        token_ids: list[int],
        tools: list[dict[str, Any]] | None = None,
        id_salt: str = "",
        stop: str | None = None,
    ) -> ParsedCompletion: ...

    def to_message(self, parsed: ParsedCompletion) -> Message: ...

    tool_call_format: str  # a lego.models.tool_parsers.PARSERS name: how a forced tool call is opened


@dataclass
class ChatRequest:
    """One call in canonical form (OpenAI chat messages and tools), whatever API it came through."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    model: str = ""
    logprobs: bool = False
    """Return each sampled token's logprob (:attr:`ChatResult.token_logprobs`)."""
    parallel_tool_calls: bool = True
    """False: the turn ends after its first complete tool call (the generation is cut there)."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to the chat template for this call, over ``proxy.chat_template_kwargs`` (e.g. enable_thinking)."""
    prefill: str = ""
    """An assistant prefill (Anthropic: the request ends with an assistant turn): the policy
    continues this text; it enters the prompt as template tokens (mask 0) and the reply holds
    only the continuation."""
    dropped_tools: list[str] = field(default_factory=list)
    """Hosted tools the request declared (run by the API provider: web search, code execution)
    that were left out of what the policy is offered: this proxy cannot run them. Reported in the
    ``x-lego-dropped-tools`` header and the ``hosted_tools_dropped`` counter (see wire.HOSTED_TOOLS)."""


@dataclass
class ChatResult:
    """What the policy answered: the canonical assistant message plus usage and finish reason."""

    message: Message
    reasoning: str
    finish_reason: str  # stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    headers: dict[str, str]
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))
    stop_sequence: str | None = None
    token_logprobs: list[tuple[str, float]] | None = None
    """(token text, logprob) of each sampled token, final end-of-turn excluded (when asked for)."""
    prefill: str = ""
    """The request's assistant prefill: ``message`` holds prefill + continuation (what the
    recorder keeps); :meth:`reply_content` is what the API returns."""

    def reply_content(self) -> str:
        """The assistant content without the request's prefill (APIs return only what was generated)."""
        content = str(self.message.get("content") or "")
        lead = self.prefill.strip()
        return content[len(lead) :] if lead and content.startswith(lead) else content
