"""OpenAI chat completions: request schema, conversion to canonical messages, responses and SSE.

The canonical form is OpenAI chat itself, narrowed: ``developer`` becomes ``system``, content part
lists become strings, unknown keys are dropped, so that the same history sent twice compares equal.
Streaming follows the chat-completion chunk shape: a role delta, content / reasoning deltas,
tool-call deltas (``index``, then ``id``/``name`` once, then argument fragments), a finish chunk,
and, with ``stream_options.include_usage``, a usage chunk with empty ``choices``; then ``[DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lego.proxies.errors import ApiError
from lego.proxies.service import ChatRequest, ChatResult
from lego.proxies.wire import chunks, sse, text_of_parts

__all__ = ["ChatCompletionRequest", "canonical_tools", "chat_response", "chat_stream", "to_chat_request"]


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatCompletionRequest(BaseModel):
    """The fields of ``POST /v1/chat/completions`` the proxy reads; others are accepted and ignored."""

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
    n: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, Any] | None = None


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
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(c.get("id"), str) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"{where}.tool_calls[{j}] needs a string 'id' and a 'function' with a string 'name'")
        calls.append(
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", "{}"))},
            }
        )
    return calls


_CANONICAL_KEYS = {
    "user": {"role", "content"},
    "system": {"role", "content"},
    "tool": {"role", "tool_call_id", "content"},
}


def canonical_message(m: Any, i: int) -> dict[str, Any]:
    if type(m) is dict and isinstance(m.get("content"), str) and m.keys() == _CANONICAL_KEYS.get(m.get("role"), ()):  # type: ignore[arg-type]
        if m["role"] != "tool" or isinstance(m["tool_call_id"], str):
            return m  # already canonical: the common case for long histories, kept copy-free
    where = f"messages[{i}]"
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ApiError(400, f"{where}: each message must be an object with a string 'role'", param=f"{where}.role")
    role = m["role"]
    if role in ("system", "developer"):
        return {"role": "system", "content": text_of_parts(m.get("content"), where)}
    if role == "user":
        return {"role": "user", "content": text_of_parts(m.get("content"), where)}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": text_of_parts(m.get("content"), where)}
        reasoning = m.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out["reasoning_content"] = reasoning
        if m.get("tool_calls"):
            out["tool_calls"] = _tool_calls(m["tool_calls"], where)
        return out
    if role == "tool":
        if not isinstance(m.get("tool_call_id"), str):
            raise ApiError(400, f"{where}: a tool message needs a string 'tool_call_id'", param=f"{where}.tool_call_id")
        return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": text_of_parts(m.get("content"), where)}
    raise ApiError(
        400, f"{where}: unknown role {role!r}; use system, developer, user, assistant or tool", param=f"{where}.role"
    )


def to_chat_request(req: ChatCompletionRequest) -> ChatRequest:
    if req.n is not None and req.n > 1:
        raise ApiError(400, "n > 1 is unsupported: ask for one choice per request", param="n")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return ChatRequest(
        messages=[canonical_message(m, i) for i, m in enumerate(req.messages)],
        tools=canonical_tools(req.tools),
        tool_choice=req.tool_choice,
        max_tokens=req.max_completion_tokens or req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        stop=stop,
        stream=req.stream,
        model=req.model,
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


def chat_response(res: ChatResult, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{res.id}",
        "object": "chat.completion",
        "created": res.created,
        "model": model,
        "choices": [{"index": 0, "message": _message_out(res), "logprobs": None, "finish_reason": res.finish_reason}],
        "usage": _usage(res),
    }


def chat_stream(res: ChatResult, model: str, include_usage: bool) -> Iterator[bytes]:
    base = {"id": f"chatcmpl-{res.id}", "object": "chat.completion.chunk", "created": res.created, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            body["usage"] = None
        return sse(body)

    yield chunk({"role": "assistant", "content": ""})
    for piece in chunks(res.reasoning):
        yield chunk({"reasoning_content": piece})
    for piece in chunks(res.message.get("content") or ""):
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
    yield chunk({}, res.finish_reason)
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(res)})
    yield b"data: [DONE]\n\n"
