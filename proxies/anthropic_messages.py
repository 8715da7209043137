"""Anthropic messages: request schema, conversion to canonical messages, responses and SSE.

Conversion: ``system`` becomes a system message; a user turn's ``tool_result`` blocks become tool
messages (in order, before the turn's text); an assistant turn's ``thinking`` becomes
``reasoning_content`` and its ``tool_use`` blocks become tool calls (``input`` JSON-encoded). A key
of a message or block that is not converted is a 400 naming its path (``messages[2].content[0].foo``)
unless it is null or empty or one of the echoes and hints of :data:`INERT_FIELDS`.
Streaming follows Anthropic's event sequence: ``message_start``, per block
``content_block_start`` / ``content_block_delta`` (``thinking_delta``, ``text_delta``,
``input_json_delta``) / ``content_block_stop``, then ``message_delta`` (stop reason, output
tokens) and ``message_stop``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lego.proxies.errors import ApiError, error_body
from lego.proxies.service import ChatRequest, ChatResult
from lego.proxies.streaming import LiveReply
from lego.proxies.wire import (
    ANTHROPIC_HOSTED_PREFIXES,
    IMAGE_PART_TYPES,
    chunks,
    effort_thinking,
    new_id,
    refuse,
    refuse_fields,
    refuse_unknown,
    sse,
    text_of_parts,
)

__all__ = ["INERT_FIELDS", "MessagesRequest", "messages_response", "messages_stream", "to_chat_request"]


class AnthropicTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class AnthropicMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]]


# Fields that change nothing the policy samples (capacity, region, speed, prompt-caching hints): accepted as is.
ADVISORY_FIELDS = frozenset({"service_tier", "cache_control", "inference_geo", "speed"})
# Per-tool fields that change nothing the policy sees (prompt-caching hints).
_ADVISORY_TOOL_FIELDS = frozenset({"cache_control"})
# Keys accepted on a content block (or a system block) whatever they hold: none changes what the policy
# samples. Any other key of a message or a block is a 400 naming its path, unless null or empty.
INERT_FIELDS = frozenset(
    {
        "cache_control",  # a prompt-caching hint (Claude Code marks its latest blocks with it)
        "citations",  # the sources a text block cites: metadata over its `text`, which is what renders
        "signature",  # a thinking block's integrity check, echoed back as this proxy sent it
        # A tool_result's failure flag: chat templates have no field for it, and harnesses write the
        # failure into the result's text (Claude Code: "Exit code 1 ...", "<tool_use_error>...").
        "is_error",
    }
)
_BLOCK_KEYS = {
    "text": frozenset({"type", "text"}),
    "thinking": frozenset({"type", "thinking"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
    "tool_result": frozenset({"type", "tool_use_id", "content"}),
}


class MessagesRequest(BaseModel):
    """``POST /v1/messages`` (and ``count_tokens``). Every field is honoured or refused with a 400
    that names it; unmodelled fields are refused unless in :data:`ADVISORY_FIELDS`. ``max_tokens``
    is required, as in the Messages API."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int = Field(ge=1)
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None


def _tools(tools: list[AnthropicTool] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Client tools become canonical tools; server tools (web search ...) are left out and named
    (:data:`lego.proxies.wire.HOSTED_TOOLS`); Anthropic-defined client tools are a 400."""
    out = []
    dropped = []
    for i, t in enumerate(tools or []):
        if t.type is not None and t.type.startswith(ANTHROPIC_HOSTED_PREFIXES):
            dropped.append(t.name)
            continue
        if t.type not in (None, "custom"):
            raise refuse(f"tools[{i}].type", f"server tool {t.type!r} cannot run here; declare client tools only")
        refuse_unknown(
            {f"tools[{i}].{k}": v for k, v in (t.model_extra or {}).items() if k not in _ADVISORY_TOOL_FIELDS},
            frozenset(),
        )
        fn: dict[str, Any] = {"name": t.name}
        if t.description is not None:
            fn["description"] = t.description
        fn["parameters"] = t.input_schema
        out.append({"type": "function", "function": fn})
    return out, dropped


def _tool_choice(tc: dict[str, Any] | None) -> tuple[Any, bool]:
    """(canonical tool_choice, parallel tool calls allowed)."""
    if not tc:
        return None, True
    refuse_unknown(
        {f"tool_choice.{k}": v for k, v in tc.items() if k not in ("type", "name", "disable_parallel_tool_use")},
        frozenset(),
    )
    parallel = not tc.get("disable_parallel_tool_use", False)
    kind = tc.get("type")
    if kind == "tool":
        if not isinstance(tc.get("name"), str):
            raise refuse("tool_choice.name", "tool_choice of type 'tool' needs the tool's 'name'")
        return {"type": "function", "function": {"name": tc["name"]}}, parallel
    if kind in ("any", "auto", "none"):
        return {"any": "required", "auto": "auto", "none": "none"}[kind], parallel
    raise refuse("tool_choice", f"unknown tool_choice type {kind!r}; use auto, any, tool or none")


def _block_kind(b: dict[str, Any], where: str) -> Any:
    """A block's type, once its keys are checked (an unknown type is left to the caller's 400)."""
    kind = b.get("type")
    if kind in _BLOCK_KEYS:
        refuse_fields(b, where, _BLOCK_KEYS[kind], INERT_FIELDS)
    return kind


def _user_blocks(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, b in enumerate(blocks):
        kind = _block_kind(b, f"{where}.content[{j}]")
        if kind == "tool_result":
            tool_use_id = b.get("tool_use_id")
            if not isinstance(tool_use_id, str):
                raise ApiError(400, f"{where}.content[{j}]: tool_result needs a string 'tool_use_id'")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": tool_use_id,
                    "content": text_of_parts(b.get("content"), f"{where}.content[{j}]", INERT_FIELDS),
                }
            )
        elif kind == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
        elif kind in IMAGE_PART_TYPES:
            raise ApiError(400, f"{where}.content[{j}]: images are unsupported; send text only")
        else:
            raise ApiError(400, f"{where}.content[{j}]: unsupported block type {kind!r} in a user turn")
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _assistant_blocks(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    texts, thinking, calls = [], [], []
    for j, b in enumerate(blocks):
        kind = _block_kind(b, f"{where}.content[{j}]")
        if kind == "text":
            texts.append(str(b.get("text", "")))
        elif kind == "thinking":
            thinking.append(str(b.get("thinking", "")))
        elif kind == "redacted_thinking":
            continue  # another model's encrypted reasoning: nothing a template could render
        elif kind == "tool_use":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str):
                raise ApiError(400, f"{where}.content[{j}]: tool_use needs string 'id' and 'name'")
            args = json.dumps(b.get("input", {}), ensure_ascii=False)
            calls.append({"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": args}})
        else:
            raise ApiError(400, f"{where}.content[{j}]: unsupported block type {kind!r} in an assistant turn")
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thinking:
        out["reasoning_content"] = "".join(thinking)
    if calls:
        out["tool_calls"] = calls
    return out


def _prefill(messages: list[dict[str, Any]]) -> str:
    """Pop a final assistant turn (a prefill the policy continues) and return its text."""
    if not messages or messages[-1]["role"] != "assistant":
        return ""
    last = messages.pop()
    if last.get("tool_calls") or last.get("reasoning_content"):
        raise ApiError(
            400,
            "the final assistant turn (a prefill) may hold text only, not tool_use or thinking blocks",
            param=f"messages[{len(messages)}].content",
        )
    text = str(last.get("content") or "")
    if text != text.rstrip():
        raise ApiError(
            400,
            "final assistant content cannot end with trailing whitespace",
            param=f"messages[{len(messages)}].content",
        )
    return text


def to_chat_request(req: MessagesRequest) -> ChatRequest:
    refuse_unknown(req.model_extra, ADVISORY_FIELDS)
    template_kwargs = _thinking(req)
    config = dict(req.output_config or {})
    if config.get("format") is not None:
        raise refuse("output_config.format", "structured output formats are not enforced by this proxy")
    refuse_unknown({f"output_config.{k}": v for k, v in config.items() if k not in ("format", "effort")}, frozenset())
    # Claude Code sends effort with adaptive thinking: an explicit thinking switch wins over the effort's.
    template_kwargs = {**effort_thinking(config.get("effort"), "output_config.effort"), **template_kwargs}
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": text_of_parts(req.system, "system", INERT_FIELDS, field="")})
    for i, m in enumerate(req.messages):
        where = f"messages[{i}]"
        refuse_fields(m.model_extra or {}, where, frozenset())
        if m.role not in ("user", "assistant", "system"):
            raise ApiError(
                400, f"{where}: unknown role {m.role!r}; Anthropic messages take user, assistant (or system)"
            )
        if m.role == "system":  # Claude Code 2.x puts environment notes mid-conversation as a system turn
            messages.append({"role": "system", "content": text_of_parts(m.content, where, INERT_FIELDS)})
        elif isinstance(m.content, str):
            messages.append({"role": m.role, "content": m.content})
        elif m.role == "user":
            messages.extend(_user_blocks(m.content, where))
        else:
            messages.append(_assistant_blocks(m.content, where))
    prefill = _prefill(messages)
    tool_choice, parallel = _tool_choice(req.tool_choice)
    tools, dropped = _tools(req.tools)
    return ChatRequest(
        messages=messages,
        tools=tools,
        dropped_tools=dropped,
        tool_choice=tool_choice,
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop=list(req.stop_sequences or []),
        stream=req.stream,
        model=req.model,
        parallel_tool_calls=parallel,
        prefill=prefill,
        chat_template_kwargs=template_kwargs,
    )


def _thinking(req: MessagesRequest) -> dict[str, Any]:
    """Extended thinking as the template's switch: ``enabled``/``adaptive`` turn it on, ``disabled`` off
    (``enable_thinking``, read by hybrid-thinking templates such as Qwen3's). ``budget_tokens`` is, as in
    the Messages API, a target for how much the model reasons, not a hard cut: the reply as a whole is
    bounded by ``max_tokens``, and the API's own rule (budget below max_tokens, at least 1024) is checked."""
    if req.thinking is None:
        return {}
    kind = req.thinking.get("type")
    refuse_unknown(
        {f"thinking.{k}": v for k, v in req.thinking.items() if k not in ("type", "budget_tokens")}, frozenset()
    )
    if kind == "disabled":
        return {"enable_thinking": False}
    if kind not in ("enabled", "adaptive"):
        raise refuse("thinking.type", "use enabled, adaptive or disabled")
    budget = req.thinking.get("budget_tokens")
    if kind == "enabled":
        if not isinstance(budget, int) or budget < 1024:
            raise ApiError(
                400, "thinking.budget_tokens: an integer >= 1024 is required", param="thinking.budget_tokens"
            )
        if req.max_tokens is not None and budget >= req.max_tokens:
            raise ApiError(400, "thinking.budget_tokens must be less than max_tokens", param="thinking.budget_tokens")
    return {"enable_thinking": True}


def _input_of(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _blocks(res: ChatResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if res.reasoning:
        blocks.append({"type": "thinking", "thinking": res.reasoning, "signature": ""})
    if res.reply_content():
        blocks.append({"type": "text", "text": res.reply_content()})
    for c in res.message.get("tool_calls") or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": c["id"],
                "name": c["function"]["name"],
                "input": _input_of(c["function"]["arguments"]),
            }
        )
    return blocks


def _stop_reason(res: ChatResult) -> str:
    if res.finish_reason == "tool_calls":
        return "tool_use"
    if res.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if res.stop_sequence else "end_turn"


def _usage(res: ChatResult, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": res.prompt_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def messages_response(res: ChatResult, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{res.id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(res),
        "stop_reason": _stop_reason(res),
        "stop_sequence": res.stop_sequence,
        "usage": _usage(res, res.completion_tokens),
    }


async def messages_stream(live: LiveReply, model: str) -> AsyncIterator[bytes]:
    """Message events as tokens arrive (a thinking block, then a text block, then tool_use blocks
    once their calls parse); ``ping`` events while idle; an ``error`` event if the generation fails
    after the stream began."""
    start: dict[str, Any] = {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    yield sse({"type": "message_start", "message": start}, "message_start")
    index, open_kind = -1, ""

    def block(kind: str, opening: dict[str, Any]) -> Iterator[bytes]:
        nonlocal index, open_kind
        if open_kind == kind:
            return
        if open_kind:
            yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index, open_kind = index + 1, kind
        yield sse({"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start")

    def text(kind: str, piece: str) -> Iterator[bytes]:
        if kind == "reasoning":
            yield from block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            delta = {"type": "thinking_delta", "thinking": piece}
        else:
            yield from block("text", {"type": "text", "text": ""})
            delta = {"type": "text_delta", "text": piece}
        yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")

    async for kind, piece in live.deltas():
        if kind == "ping":
            yield sse({"type": "ping"}, "ping")
        else:
            for event in text(kind, piece):
                yield event
    try:
        res: ChatResult = await live.result()
    except ApiError as err:
        yield sse(error_body("messages", err), "error")
        return
    reasoning, content = live.rest(res.reasoning, res.reply_content())
    for kind, rest in (("reasoning", reasoning), ("content", content)):
        for piece in chunks(rest):
            for event in text(kind, piece):
                yield event
    for b in _blocks(res):
        if b["type"] != "tool_use":
            continue
        for event in block(b["id"], {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}):
            yield event
        for p in chunks(json.dumps(b["input"], ensure_ascii=False)):
            delta = {"type": "input_json_delta", "partial_json": p}
            yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
    if open_kind:
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    end = {"stop_reason": _stop_reason(res), "stop_sequence": res.stop_sequence}
    usage = {"input_tokens": res.prompt_tokens, "output_tokens": res.completion_tokens}
    yield sse({"type": "message_delta", "delta": end, "usage": usage}, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")
