"""A session's conversation threads: their identity, their standing, and their open segment.

The recorder (:mod:`lego.proxies.recorder`) keeps one :class:`Thread` per conversation a session
holds. A thread is identified by its opening (:func:`thread_key`: system prompt and tools schema);
its :func:`standing`, fixed by the request that opened it, decides which thread is the main thread.
Its open segment is an :class:`OpenSegment`: flat token arrays plus the message boundaries the
recorder splices at.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass, field
from typing import Any

from lego.types import NO_LOGPROB, MainThreadSpec, Segment, logprobs_from_array

__all__ = ["OpenSegment", "Thread", "Turn", "first_user", "standing", "system_text", "thread_key", "tool_arguments"]

Message = dict[str, Any]


def _system_content(messages: list[Message]) -> Any:
    """The content of the leading system (or developer) message; None if the conversation has none."""
    if messages and messages[0].get("role") in ("system", "developer"):
        return messages[0].get("content")
    return None


def system_text(messages: list[Message]) -> str:
    c = _system_content(messages)
    return "" if c is None else c if isinstance(c, str) else json.dumps(c, sort_keys=True)


def first_user(messages: list[Message]) -> str:
    for m in messages:
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c, sort_keys=True)
    return ""


def _plain_system(messages: list[Message]) -> str:
    """The system prompt as text (content parts joined), for matching a declaration against it."""
    c = _system_content(messages)
    if isinstance(c, list):
        return "\n".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return c if isinstance(c, str) else ""


def tool_arguments(call: dict[str, Any]) -> Any:
    """A tool call's (name, arguments) with JSON-string arguments decoded, as templates see them."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            pass  # rendering refuses it later, with the message's index
    return fn.get("name"), args


def _tool_names(tools: list[dict[str, Any]] | None) -> set[str]:
    return {str((t.get("function") or t).get("name")) for t in tools or []}


def standing(messages: list[Message], tools: list[dict[str, Any]] | None, spec: MainThreadSpec | None = None) -> int:
    """How strongly a thread's opening request looks like the harness's own (see :mod:`lego.proxies.recorder`).

    With a declaration ``spec``: 1 if the request fits it, else 0 (only fitting threads can be main).
    Without: 2 for tools plus 1 for a system prompt (0-3).
    """
    if spec is not None:
        fits_system = spec.system_contains is None or spec.system_contains in _plain_system(messages)
        return int(fits_system and spec.tool_names <= _tool_names(tools))
    return 2 * bool(tools) + bool(system_text(messages))


def thread_key(messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
    """The identity of a conversation thread: its system prompt and its tools schema.

    A subagent or a title generator runs with another system prompt or another tool set; a
    compaction of the main thread keeps both (and becomes a new segment of the same thread).
    """
    blob = json.dumps([system_text(messages), tools or []], sort_keys=True, ensure_ascii=False)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass
class Turn:
    """An assistant message the proxy produced, as it returned it."""

    message: Message
    tool_call_ids: tuple[str, ...]
    content: str


@dataclass
class OpenSegment:
    """The open segment of a thread as flat parallel arrays (``prompt_len``: where sampling began).

    ``ids`` is a list (prompts are built from it by a pointer copy); mask, logprobs and versions
    are compact arrays the garbage collector never walks. Context tokens have no logprob
    (:data:`~lego.types.NO_LOGPROB`, NaN, in the array; ``None`` in the exported segment) and version -1.
    """

    ids: list[int] = field(default_factory=list)
    mask: bytearray = field(default_factory=bytearray)
    logprobs: array[float] = field(default_factory=lambda: array("d"))
    versions: array[int] = field(default_factory=lambda: array("q"))
    prompt_len: int | None = None
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)  # message count -> (tokens, text chars)
    constrained: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of constrained tokens

    def __len__(self) -> int:
        return len(self.ids)

    def prefix(self, n: int | None = None) -> list[int]:
        """The first ``n`` token ids (all by default) as a new list."""
        return self.ids[:] if n is None else self.ids[:n]

    def extend_context(self, ids: list[int]) -> None:
        n = len(ids)
        self.ids.extend(ids)
        self.mask.extend(bytes(n))
        self.logprobs.extend(array("d", [NO_LOGPROB]) * n)
        self.versions.extend(array("q", [-1]) * n)

    def extend_sampled(self, ids: list[int], logprobs: list[float], versions: list[int]) -> None:
        """Tokens the policy sampled: mask 1, each with its logprob and the version that sampled it."""
        n = len(ids)
        self.ids.extend(ids)
        self.mask.extend(b"\x01" * n)
        self.logprobs.extend(logprobs)
        self.versions.extend(versions)

    def extend_constrained(self, ids: list[int], logprobs: list[float], versions: list[int]) -> None:
        """Tokens drawn under a decoding constraint: mask 0 (never trained on), the engine's
        logprobs and versions kept, the span flagged."""
        start = len(self.ids)
        self.ids.extend(ids)
        self.mask.extend(bytes(len(ids)))
        self.logprobs.extend(logprobs)
        self.versions.extend(versions)
        if ids:
            self.constrained.append((start, len(self.ids)))

    def truncate(self, n: int) -> None:
        for arr in (self.ids, self.mask, self.logprobs, self.versions):
            del arr[n:]
        self.constrained = [(s, min(e, n)) for s, e in self.constrained if s < n]
        if self.prompt_len is not None and self.prompt_len >= n:
            self.prompt_len = None

    def export(self) -> Segment | None:
        if self.prompt_len is None:
            return None
        p = self.prompt_len
        return Segment(
            prompt_ids=self.ids[:p],
            response_ids=self.ids[p:],
            response_mask=list(self.mask[p:]),
            response_logprobs=logprobs_from_array(self.logprobs[p:]),
            response_versions=[None if v < 0 else v for v in self.versions[p:]],
            constrained_spans=[(s - p, e - p) for s, e in self.constrained if s >= p],
        )


@dataclass
class Thread:
    """One conversation thread of a session (see :mod:`lego.proxies.recorder`)."""

    key: str
    messages: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    generated: dict[int, Turn] = field(default_factory=dict)
    seg: OpenSegment = field(default_factory=OpenSegment)
    sealed: list[Segment] = field(default_factory=list)
    gen_text: str | None = None  # the template's generation prompt for this thread's tools
    last_gen: tuple[int, int, int] | None = None  # (message index, first sampled token, end of sampled tokens)
    generations: int = 0
    order: int = 0
    opening: tuple[str, str] = ("", "")  # (system prompt, first user message) of the current segment
    standing: int = 0  # fixed by the request that opened the thread (see :func:`standing`)
