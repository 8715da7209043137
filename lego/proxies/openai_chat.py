"""OpenAI chat completions: request schema, conversion to canonical messages, responses and SSE.

The canonical form is OpenAI chat itself, narrowed: ``developer`` becomes ``system``, content part
lists become strings, unknown keys are dropped, so that the same history sent twice compares equal.
Streaming follows the chat-completion chunk shape: a role delta, content / reasoning deltas,
tool-call deltas (``index``, then ``id``/``name`` once, then argument fragments; sent once the call
parses), a finish chunk,
and, with ``stream_options.include_usage``, a usage chunk with empty ``choices``; then ``[DONE]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lego.proxies.errors import ApiError, error_body
from lego.proxies.service import ChatRequest, ChatResult
from lego.proxies.streaming import LiveReply
from lego.proxies.wire import chunks, effort_thinking, new_id, refuse, refuse_unknown, sse, text_of_parts

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
    _refuse_unsupported(req)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return ChatRequest(
        messages=[canonical_message(m, i) for i, m in enumerate(req.messages)],
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
