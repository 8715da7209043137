"""OpenAI chat completions: request schema, conversion to canonical messages, responses and SSE.

The canonical form is OpenAI chat itself, narrowed: ``developer`` becomes ``system``, content part
lists become strings, ``reasoning`` becomes ``reasoning_content``, null and empty keys and the echoes
and hints of :data:`INERT_FIELDS` are left out, so that the same history sent twice compares equal
(the recorder matches a new request against the last one message by message). A message's ``name``
stays where the model's template renders it (probed once per template) and is a 400 where it does
not; any other key is a 400 naming its path (``messages[3].foo``).
Streaming follows the chat-completion chunk shape: a role delta, content / reasoning deltas,
tool-call deltas (``index``, then ``id``/``name`` once, then argument fragments; sent once the call
parses), a finish chunk,
and, with ``stream_options.include_usage``, a usage chunk with empty ``choices``; then ``[DONE]``.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lego.errors import ChatFormatError
from lego.proxies.errors import ApiError, error_body
from lego.proxies.recorder import ChatTemplate
from lego.proxies.service import ChatRequest, ChatResult
from lego.proxies.streaming import LiveReply
from lego.proxies.wire import (
    chunks,
    effort_thinking,
    new_id,
    refuse,
    refuse_fields,
    refuse_unknown,
    says_nothing,
    sse,
    text_of_parts,
)

__all__ = [
    "INERT_FIELDS",
    "ChatCompletionRequest",
    "canonical_tools",
    "chat_response",
    "chat_stream",
    "template_renders_name",
    "to_chat_request",
]


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: FunctionSpec


# Fields that change nothing the policy samples (ids, storage and cache hints): accepted as is.
ADVISORY_FIELDS = frozenset({"user", "store", "service_tier", "prompt_cache_key", "safety_identifier"})


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``. Every field is honoured or refused with a 400 that names it
    (:func:`to_chat_request`); unmodelled fields are refused unless in :data:`ADVISORY_FIELDS`."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    # Messages are checked by canonical_message rather than per-message pydantic models: a long
    # agent history has hundreds of them and per-turn cost must stay O(new messages).
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, description="vLLM's extension; -1 or 0: no top-k truncation.")
    n: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="vLLM's extension: passed to the chat template (e.g. enable_thinking)."
    )
    metadata: dict[str, Any] | None = None
    reasoning_effort: str | None = Field(
        None,
        description="Thinking on or off for hybrid-thinking templates (enable_thinking); see wire.effort_thinking.",
    )
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    modalities: list[str] | None = None


def _refuse_unsupported(req: ChatCompletionRequest) -> None:
    refuse_unknown(req.model_extra, ADVISORY_FIELDS)
    if req.n is not None and req.n > 1:
        raise refuse("n", "n > 1 is unsupported: ask for one choice per request")
    if req.top_logprobs:
        raise refuse("top_logprobs", "the engine records only each sampled token's logprob, not the alternatives")
    if req.top_logprobs is not None and not req.logprobs:
        raise refuse("top_logprobs", "top_logprobs needs logprobs: true")
    if req.response_format is not None and req.response_format.get("type") != "text":
        raise refuse("response_format", "structured output (json_object, json_schema) is not enforced by this proxy")
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(req, name):
            raise refuse(name, "the engine applies no penalties; only 0 is supported")
    if req.logit_bias:
        raise refuse("logit_bias", "the engine applies no logit bias")
    if req.modalities is not None and set(req.modalities) - {"text"}:
        raise refuse("modalities", "only text output is supported")
    if req.stream_options is not None:
        refuse_unknown({k: v for k, v in req.stream_options.items() if k != "include_usage"}, frozenset())
    for i, tool in enumerate(req.tools or []):
        if tool.function.model_extra and tool.function.model_extra.get("strict"):
            raise refuse(f"tools[{i}].function.strict", "strict schema adherence of arguments is not enforced")


def canonical_tools(tools: list[ToolSpec] | None) -> list[dict[str, Any]]:
    out = []
    for t in tools or []:
        fn: dict[str, Any] = {"name": t.function.name}
        if t.function.description is not None:
            fn["description"] = t.function.description
        fn["parameters"] = (
            t.function.parameters if t.function.parameters is not None else {"type": "object", "properties": {}}
        )
        out.append({"type": "function", "function": fn})
    return out


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def _tool_calls(raw: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise ApiError(400, f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
    calls = []
    for j, c in enumerate(raw):
        at = f"{where}.tool_calls[{j}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(c.get("id"), str) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"{at} needs a string 'id' and a 'function' with a string 'name'")
        if c.get("type", "function") != "function":
            raise refuse(f"{at}.type", f"tool call type {c['type']!r} is unsupported; use 'function'")
        refuse_fields(c, at, _CALL_KEYS, INERT_FIELDS)
        refuse_fields(fn, f"{at}.function", _FUNCTION_KEYS)
        calls.append(
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", "{}"))},
            }
        )
    return calls


# Keys accepted on a message, a content part or a tool call whatever they hold: none changes what the
# policy samples. Keys the OpenAI SDK echoes back null from a reply the proxy never fills (refusal,
# audio, function_call) pass as null; holding a value, each would be part of a turn that this proxy
# does not render (a refusal text, an audio reply, a legacy function call), so it is a 400.
INERT_FIELDS = frozenset(
    {
        "annotations",  # url citations echoed from a reply: metadata over `content`, which is what renders
        "cache_control",  # a prompt-caching hint (OpenRouter, LiteLLM, DashScope; OpenCode sends it for Claude models)
        "index",  # a tool call's position in the stream's deltas, kept by SDKs that assemble streamed calls
        "extra_content",  # a tool call's opaque provider signature (Gemini's, which OpenCode echoes back)
    }
)
# What each role's message may hold besides the inert fields (``reasoning``: vLLM's and OpenRouter's
# name for ``reasoning_content``; Qwen Code sends both, the same text, to Qwen3 models).
_ROLE_KEYS = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "reasoning_content", "reasoning"}),
    "tool": frozenset({"role", "tool_call_id", "content", "name"}),
}
_CALL_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
# Canonical messages that need no conversion (the fast path below).
_CANONICAL_KEYS = {
    "user": {"role", "content"},
    "system": {"role", "content"},
    "tool": {"role", "tool_call_id", "content"},
}
_NAME_PROBE = "lego-name-probe-0c5d"
_names_rendered: weakref.WeakKeyDictionary[ChatTemplate, dict[str, bool]] = weakref.WeakKeyDictionary()


def template_renders_name(chat: ChatTemplate, role: str) -> bool:
    """Whether ``chat``'s template writes the ``name`` of a ``role`` message into the prompt: rendered
    once per chat format on a probe conversation whose ``role`` message is named by a sentinel."""
    known = _names_rendered.setdefault(chat, {})
    if role not in known:
        named: dict[str, Any] = {"role": role, "content": "x", "name": _NAME_PROBE}
        user: dict[str, Any] = {"role": "user", "content": "u"}
        call = {"id": "call_probe", "type": "function", "function": {"name": "probe", "arguments": "{}"}}
        convo: list[dict[str, Any]] = {
            "system": [named, user],
            "user": [named],
            "assistant": [user, named],
            "tool": [
                user,
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {**named, "tool_call_id": "call_probe"},
            ],
        }.get(role, [named])
        try:
            known[role] = _NAME_PROBE in chat.render_text(convo)
        except (ValueError, ChatFormatError):  # a template that rejects the probe renders no name there
            known[role] = False
    return known[role]


def _reasoning(m: dict[str, Any], where: str) -> str:
    texts: dict[str, str] = {}
    for key in ("reasoning_content", "reasoning"):
        value = m.get(key)
        if says_nothing(value):
            continue
        if not isinstance(value, str):
            raise ApiError(400, f"{where}.{key} must be a string", param=f"{where}.{key}")
        texts[key] = value
    if len(set(texts.values())) > 1:
        raise refuse(f"{where}.reasoning", "it differs from reasoning_content; send the reasoning once")
    return next(iter(texts.values()), "")


def canonical_message(m: Any, i: int, chat: ChatTemplate | None = None) -> dict[str, Any]:
    """``messages[i]`` in canonical form (see the module docstring). A ``name`` is kept where ``chat``'s
    template renders it (:func:`template_renders_name`) and refused otherwise (and without ``chat``)."""
    if type(m) is dict and isinstance(m.get("content"), str) and m.keys() == _CANONICAL_KEYS.get(m.get("role"), ()):  # type: ignore[arg-type]
        if m["role"] != "tool" or isinstance(m["tool_call_id"], str):
            return m  # already canonical: the common case for long histories, kept copy-free
    where = f"messages[{i}]"
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ApiError(400, f"{where}: each message must be an object with a string 'role'", param=f"{where}.role")
    role = m["role"]
    if role not in _ROLE_KEYS:
        raise ApiError(
            400,
            f"{where}: unknown role {role!r}; use system, developer, user, assistant or tool",
            param=f"{where}.role",
        )
    refuse_fields(m, where, _ROLE_KEYS[role], INERT_FIELDS)
    role = "system" if role == "developer" else role
    out: dict[str, Any] = {"role": role}
    if role == "tool":
        if not isinstance(m.get("tool_call_id"), str):
            raise ApiError(400, f"{where}: a tool message needs a string 'tool_call_id'", param=f"{where}.tool_call_id")
        out["tool_call_id"] = m["tool_call_id"]
    out["content"] = text_of_parts(m.get("content"), where, INERT_FIELDS)
    if role == "assistant":
        if reasoning := _reasoning(m, where):
            out["reasoning_content"] = reasoning
        if m.get("tool_calls"):
            out["tool_calls"] = _tool_calls(m["tool_calls"], where)
    name = m.get("name")
    if not says_nothing(name):
        if not isinstance(name, str):
            raise ApiError(400, f"{where}.name must be a string", param=f"{where}.name")
        if chat is None or not template_renders_name(chat, role):
            raise refuse(f"{where}.name", f"the model's chat template does not render the name of a {role} message")
        out["name"] = name
    return out


def to_chat_request(req: ChatCompletionRequest, chat: ChatTemplate | None = None) -> ChatRequest:
    """``req`` as a canonical call; ``chat``: the model's chat template, asked whether it renders names."""
    _refuse_unsupported(req)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return ChatRequest(
        messages=[canonical_message(m, i, chat) for i, m in enumerate(req.messages)],
        tools=canonical_tools(req.tools),
        tool_choice=req.tool_choice,
        max_tokens=req.max_completion_tokens or req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=max(req.top_k or 0, 0),
        seed=req.seed,
        stop=stop,
        stream=req.stream,
        model=req.model,
        logprobs=bool(req.logprobs),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        chat_template_kwargs={
            **effort_thinking(req.reasoning_effort, "reasoning_effort"),
            **(req.chat_template_kwargs or {}),
        },
    )


def _message_out(res: ChatResult) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": res.message.get("content") or None}
    if res.reasoning:
        msg["reasoning_content"] = res.reasoning
    calls = res.message.get("tool_calls") or []
    if calls:
        msg["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])},
            }
            for c in calls
        ]
    return msg


def _usage(res: ChatResult) -> dict[str, int]:
    return {
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "total_tokens": res.prompt_tokens + res.completion_tokens,
    }


def _logprobs(res: ChatResult) -> dict[str, Any] | None:
    if res.token_logprobs is None:
        return None
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []} for t, lp in res.token_logprobs
        ],
        "refusal": None,
    }


def chat_response(res: ChatResult, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{res.id}",
        "object": "chat.completion",
        "created": res.created,
        "model": model,
        "choices": [
            {"index": 0, "message": _message_out(res), "logprobs": _logprobs(res), "finish_reason": res.finish_reason}
        ],
        "usage": _usage(res),
    }


async def chat_stream(live: LiveReply, model: str, include_usage: bool) -> AsyncIterator[bytes]:
    """Chat-completion chunks as tokens arrive; ``: ping`` comments while idle; an ``error`` chunk
    if the generation fails after the stream began."""
    rid, created = f"chatcmpl-{new_id('')}", int(time.time())
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None, res: ChatResult | None = None) -> bytes:
        # The token logprobs ride on the finish chunk (SDKs concatenate them across chunks).
        lps = _logprobs(res) if res is not None else None
        body = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": lps, "finish_reason": finish}]}
        if include_usage:
            body["usage"] = None
        return sse(body)

    yield chunk({"role": "assistant", "content": ""})
    async for kind, text in live.deltas():
        if kind == "ping":
            yield b": ping\n\n"
        else:
            yield chunk({"reasoning_content" if kind == "reasoning" else "content": text})
    try:
        res: ChatResult = await live.result()
    except ApiError as err:
        yield sse(error_body("chat", err))
        return
    reasoning, content = live.rest(res.reasoning, str(res.message.get("content") or ""))
    for piece in chunks(reasoning):
        yield chunk({"reasoning_content": piece})
    for piece in chunks(content):
        yield chunk({"content": piece})
    for idx, call in enumerate(res.message.get("tool_calls") or []):
        fn = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": idx,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": ""},
                    }
                ]
            }
        )
        for piece in chunks(_arguments(fn["arguments"])):
            yield chunk({"tool_calls": [{"index": idx, "function": {"arguments": piece}}]})
    yield chunk({}, res.finish_reason, res)
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(res)})
    yield b"data: [DONE]\n\n"
