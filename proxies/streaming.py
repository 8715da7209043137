"""Token streaming: sampled ids, as the engine produces them, become text deltas an API can send.

:class:`TextDeltas` turns ids into reasoning and content deltas that are always a prefix of what
the finished reply holds (the API faces send the remainder once the generation ends). It re-parses
the text so far with the model's own completion parser and holds back the last few characters, so
a half-written marker (``<tool_call>``, ``</think>``, a stop string) is never sent as text; once a
tool call starts, content is held until the call parses at the end. :class:`LiveReply` is what a
face's stream function reads: the deltas as they come (with ``ping`` when the stream is idle, the
prefill included), then the result or the error that ended the generation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Literal, Protocol

from lego.models.tool_parsers import THINK_CLOSE, THINK_OPEN, parse_completion_text

__all__ = ["DeltaSink", "LiveReply", "TextDeltas"]

log = logging.getLogger("lego.proxy")

Kind = Literal["reasoning", "content"]
DeltaSink = Callable[[Kind, str], None]
# Longest text that may start a tool call or a reasoning block in any supported format.
_MARKERS = ("<tool_call>", "<|python_tag|>", "<｜tool▁calls▁begin｜>", "<|channel|>", "<|start|>", THINK_CLOSE)
_HOLDBACK = max(len(m) for m in _MARKERS)


class _Chat(Protocol):
    tool_call_format: str
    eos_token_ids: list[int]

    def decode(self, ids: list[int]) -> str: ...


class TextDeltas:
    """Reasoning / content deltas of a generation, fed its ids as they are sampled.

    ``thinking_open``: the prompt already opened a ``<think>`` block (the text starts inside it).
    ``enabled=False`` (a forced tool call or prefill): nothing streams; the face sends it all at the end.
    """

    def __init__(
        self, chat: _Chat, tools: list[dict[str, Any]] | None, stops: list[str], thinking_open: bool, enabled: bool
    ) -> None:
        self.chat = chat
        self.tools = tools or None
        self.stops = [s for s in stops if s]
        self.hold = max([_HOLDBACK, *(len(s) for s in self.stops)])
        self.lead = THINK_OPEN if thinking_open else ""
        self.ids: list[int] = []
        self.sent: dict[Kind, str] = {"reasoning": "", "content": ""}
        self.frozen = not enabled
        self.content_frozen = False

    def feed(self, ids: list[int]) -> list[tuple[Kind, str]]:
        self.ids.extend(ids)
        if self.frozen or (self.ids and self.ids[-1] in self.chat.eos_token_ids):
            return []  # the end: the face sends what is left from the parsed result
        text = self.lead + self.chat.decode(self.ids)
        if any(s in text for s in self.stops):
            self.frozen = True  # the reply is cut at the stop string; nothing after it may be sent
            return []
        parsed = parse_completion_text(text, finished=False, tools=self.tools, parser=self.chat.tool_call_format)
        out: list[tuple[Kind, str]] = []
        closed = THINK_CLOSE in text
        if parsed.reasoning is not None and not self.sent["content"]:
            reasoning = parsed.reasoning if closed else parsed.reasoning[: max(0, len(parsed.reasoning) - self.hold)]
            out += self._grow("reasoning", reasoning)
        if parsed.tool_calls or parsed.parse_errors or parsed.content.lstrip().startswith("{"):
            self.content_frozen = True  # a tool call (or what may be one) is buffered until it parses
        if (parsed.reasoning is None or closed) and not self.content_frozen:
            content = parsed.content[: max(0, len(parsed.content) - self.hold)]
            out += self._grow("content", content)
        return out

    def _grow(self, kind: Kind, safe: str) -> list[tuple[Kind, str]]:
        sent = self.sent[kind]
        if not safe.startswith(sent):
            if kind == "content":
                self.content_frozen = True
            return []
        if len(safe) == len(sent):
            return []
        self.sent[kind] = safe
        return [(kind, safe[len(sent) :])]


class LiveReply:
    """One streamed generation as a face's stream function reads it (see the module docstring).

    ``LiveReply(run, ping_s)`` runs ``run(sink, generating)`` (the service call) as a task: ``sink``
    takes the text deltas, ``generating()`` is called once the request passed every check and went
    to the engine. :meth:`first` waits for the first delta, the end, or a prefill longer than a
    grace, so that an error before any token keeps its HTTP status while a long prefill still gets
    its stream opened; :meth:`deltas` yields ``(kind, text)`` pairs, ``("ping", "")`` after
    ``ping_s`` of silence; :meth:`result` is the finished reply (or raises what ended it);
    :meth:`rest` what the reply holds beyond the deltas sent. Closing the stream early cancels the
    generation.
    """

    def __init__(self, run: Callable[[DeltaSink, Callable[[], None]], Coroutine[Any, Any, Any]], ping_s: float) -> None:
        self.ping_s = ping_s
        self.sent: dict[str, str] = {"reasoning": "", "content": ""}
        self._buffer: list[tuple[Kind, str]] = []
        self._wake = asyncio.Event()
        self._generating_since: float | None = None  # loop time the engine got the request
        self.task = asyncio.ensure_future(run(self._sink, self._generating))
        self.task.add_done_callback(lambda _: self._wake.set())

    def _sink(self, kind: Kind, text: str) -> None:
        self._buffer.append((kind, text))
        self._wake.set()

    def _generating(self) -> None:
        self._generating_since = asyncio.get_running_loop().time()
        self._wake.set()

    @property
    def started(self) -> bool:
        return bool(self._buffer) or self.task.done()

    async def first(self, poll_s: float, gone: Callable[[], Coroutine[Any, Any, bool]], grace_s: float) -> bool:
        """Wait until a delta arrived, the generation ended, or the engine has held the request for
        ``grace_s`` without a token (a long prefill); False if ``gone()`` says the client left."""
        loop = asyncio.get_running_loop()
        while not self.started:
            wait = poll_s
            if self._generating_since is not None:
                left = self._generating_since + grace_s - loop.time()
                if left <= 0:
                    return True
                wait = min(wait, left)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                if await gone():
                    self.cancel()
                    return False
            self._wake.clear()
        return True

    async def deltas(self) -> AsyncIterator[tuple[str, str]]:
        while True:
            if self._buffer:
                taken, self._buffer = self._buffer, []
                for kind, text in taken:
                    self.sent[kind] += text
                    yield kind, text
                continue
            if self.task.done():
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.ping_s)
            except TimeoutError:
                yield "ping", ""

    async def result(self) -> Any:
        return await self.task

    def rest(self, reasoning: str, content: str) -> tuple[str, str]:
        """What ``reasoning`` / ``content`` hold beyond what was streamed of each."""
        out = []
        for kind, final in (("reasoning", reasoning), ("content", content)):
            sent = self.sent[kind]
            if not final.startswith(sent):  # cannot happen by TextDeltas' construction; never resend
                log.warning("streamed %s is not a prefix of the final reply; the rest is not sent", kind)
                out.append("")
            else:
                out.append(final[len(sent) :])
        return out[0], out[1]

    def cancel(self) -> None:
        if not self.task.done():
            self.task.cancel()
