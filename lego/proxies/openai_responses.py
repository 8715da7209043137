"""OpenAI Responses: request schema, conversion of input items to canonical messages, responses
and SSE.

Input items: ``message`` items (roles user/system/developer/assistant), ``function_call`` items,
``function_call_output`` items and ``reasoning`` items. Consecutive assistant-side items
(reasoning, assistant message, function calls) are merged into one canonical assistant message,
since that is how one turn of ours comes back. ``previous_response_id`` is resolved from the
responses this proxy served (the caller passes the stored history in).

Streaming: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added``, its deltas (``response.reasoning_text.delta``;
``response.content_part.added`` / ``response.output_text.delta`` / ``.done`` /
``response.content_part.done``; ``response.function_call_arguments.delta`` / ``.done``),
``response.output_item.done``; finally ``response.completed``. Every event has a
``sequence_number``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lego.proxies.errors import ApiError
from lego.proxies.service import ChatRequest, ChatResult
from lego.proxies.streaming import LiveReply
from lego.proxies.wire import (
    IMAGE_PART_TYPES,
    chunks,
    effort_thinking,
    new_id,
    refuse,
    refuse_unknown,
    sse,
    text_of_parts,
)

__all__ = ["ResponsesRequest", "in_progress", "responses_response", "responses_stream", "to_chat_request"]


# Fields that change nothing the policy samples (ids, storage and cache hints): accepted as is.
ADVISORY_FIELDS = frozenset(
    {"store", "user", "safety_identifier", "service_tier", "prompt_cache_key", "client_metadata"}
)
# ``include`` values: logprobs are honoured; encrypted reasoning is asked for "if any" and we keep none.
_INCLUDE = frozenset({"message.output_text.logprobs", "reasoning.encrypted_content"})


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``. Every field is honoured or refused with a 400 that names it;
    unmodelled fields are refused unless in :data:`ADVISORY_FIELDS`."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    stream: bool = False
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    background: bool | None = None


def _refuse_unsupported(req: ResponsesRequest) -> None:
    refuse_unknown(req.model_extra, ADVISORY_FIELDS)
    if req.top_logprobs:
        raise refuse("top_logprobs", "the engine records only each sampled token's logprob, not the alternatives")
    for value in req.include or []:
        if value not in _INCLUDE:
            raise refuse("include", f"cannot include {value!r}; supported: {sorted(_INCLUDE)}")
    if req.reasoning:
        # The effort switches the template's thinking (to_chat_request); a summary of it is asked for, and
        # the whole reasoning is what this proxy returns in its reasoning items.
        refuse_unknown(
            {f"reasoning.{k}": v for k, v in req.reasoning.items() if k not in ("effort", "summary")}, frozenset()
        )
        if req.reasoning.get("summary") not in (None, "auto", "concise", "detailed"):
            raise refuse("reasoning.summary", "use auto, concise or detailed")
    if req.text:
        fmt = req.text.get("format") or {"type": "text"}
        if fmt.get("type") != "text":
            raise refuse("text.format", "structured output (json_object, json_schema) is not enforced by this proxy")
        refuse_unknown({f"text.{k}": v for k, v in req.text.items() if k != "format"}, frozenset())
    if req.truncation not in (None, "disabled"):
        raise refuse("truncation", "the proxy never truncates a conversation; use 'disabled'")
    if req.background:
        raise refuse("background", "background responses are not supported")


def _flatten(tools: list[dict[str, Any]] | None) -> list[tuple[str, dict[str, Any]]]:
    """``(namespace, tool)`` for every tool: a ``namespace`` tool (Codex groups its sub-agent tools so)
    stands for the function tools it holds, each offered to the model under its own name."""
    out: list[tuple[str, dict[str, Any]]] = []
    for t in tools or []:
        if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            out.extend((str(t.get("name", "")), member) for member in t["tools"])
        else:
            out.append(("", t))
    return out


def _namespaces(tools: list[dict[str, Any]] | None) -> dict[str, str]:
    """Function name -> the namespace it was declared in (for the function_call items answered)."""
    return {str(t.get("name")): ns for ns, t in _flatten(tools) if ns}


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Function tools (namespaced ones included) become canonical tools; hosted tools (web search ...)
    cannot run here: a 400."""
    out = []
    for i, (_, t) in enumerate(_flatten(tools)):
        if t.get("type") != "function":
            raise refuse(f"tools[{i}].type", f"tool type {t.get('type')!r} cannot run here; declare function tools")
        if not isinstance(t.get("name"), str):
            raise ApiError(400, f"tools[{i}]: a function tool needs a string 'name'", param=f"tools[{i}].name")
        if t.get("strict"):
            raise refuse(f"tools[{i}].strict", "strict schema adherence of arguments is not enforced")
        fn: dict[str, Any] = {"name": t["name"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        fn["parameters"] = t.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": fn})
    return out


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES:
                raise ApiError(400, f"{where}.content[{j}]: images are unsupported; send text only")
    return text_of_parts(content, where)


def input_messages(items: str | list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """Canonical messages for a Responses ``input`` (and ``instructions``)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    open_turn: dict[str, Any] | None = None  # the assistant message consecutive items merge into

    def turn() -> dict[str, Any]:
        nonlocal open_turn
        if open_turn is None:
            open_turn = {"role": "assistant", "content": ""}
            out.append(open_turn)
        return open_turn

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where}: each input item must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            text = _content_text(item.get("content"), where)
            if role == "assistant":
                t = turn()
                t["content"] = t["content"] + text
                continue
            if role not in ("user", "system", "developer"):
                raise ApiError(400, f"{where}: unknown role {role!r}; use user, system, developer or assistant")
            out.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise ApiError(400, f"{where}: a function_call item needs string 'call_id' and 'name'")
            args = item.get("arguments", "{}")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": args if isinstance(args, str) else str(args)},
            }
            turn().setdefault("tool_calls", []).append(call)
            continue
        elif kind == "reasoning":
            parts = item.get("content") or []
            text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
            if text:
                t = turn()
                t["reasoning_content"] = t.get("reasoning_content", "") + text
            continue
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise ApiError(400, f"{where}: a function_call_output item needs a string 'call_id'")
            out.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": _content_text(item.get("output"), where)}
            )
        else:
            raise ApiError(400, f"{where}: unsupported input item type {kind!r}")
        open_turn = None
    return out


def to_chat_request(req: ResponsesRequest, history: list[dict[str, Any]] | None = None) -> ChatRequest:
    """``history``: the conversation of ``previous_response_id`` (without its system message)."""
    _refuse_unsupported(req)
    messages = input_messages(req.input, req.instructions)
    if history:
        lead = messages[:1] if messages and messages[0]["role"] == "system" and req.instructions else []
        messages = [*lead, *history, *messages[len(lead) :]]
    return ChatRequest(
        messages=messages,
        tools=_tools(req.tools),
        tool_choice=req.tool_choice,
        max_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        stream=req.stream,
        model=req.model,
        logprobs="message.output_text.logprobs" in (req.include or []),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        chat_template_kwargs=effort_thinking((req.reasoning or {}).get("effort"), "reasoning.effort"),
    )


def _items(res: ChatResult, namespaces: dict[str, str] | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if res.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{res.id}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": res.reasoning}],
                "status": "completed",
            }
        )
    calls = res.message.get("tool_calls") or []
    content = res.message.get("content") or ""
    if content or not calls:
        lps = [
            {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
            for t, lp in res.token_logprobs or []
        ]
        part: dict[str, Any] = {"type": "output_text", "text": content, "annotations": [], "logprobs": lps}
        items.append(
            {"type": "message", "id": f"msg_{res.id}", "status": "completed", "role": "assistant", "content": [part]}
        )
    for i, c in enumerate(calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{res.id}_{i}",
                "call_id": c["id"],
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
                "status": "completed",
                # a tool declared inside a namespace is answered with it, so the client can dispatch it
                **({"namespace": ns} if (ns := (namespaces or {}).get(c["function"]["name"])) else {}),
            }
        )
    return items


def responses_response(
    res: ChatResult, req: ResponsesRequest, model: str, response_id: str | None = None
) -> dict[str, Any]:
    incomplete = res.finish_reason == "length"
    return {
        "id": response_id or new_id("resp_"),
        "object": "response",
        "created_at": res.created,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "model": model,
        "instructions": req.instructions,
        "output": _items(res, _namespaces(req.tools)),
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id,
        "metadata": req.metadata or {},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": res.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": res.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": res.prompt_tokens + res.completion_tokens,
        },
    }


def in_progress(req: ResponsesRequest, model: str) -> dict[str, Any]:
    """The response a stream opens with: no output yet, status ``in_progress``."""
    empty = ChatResult(
        message={"role": "assistant", "content": ""},
        reasoning="",
        finish_reason="stop",
        prompt_tokens=0,
        completion_tokens=0,
        headers={},
    )
    return {**responses_response(empty, req, model), "status": "in_progress", "output": [], "usage": None}


async def responses_stream(
    live: LiveReply, build: Callable[[ChatResult], dict[str, Any]], start: dict[str, Any]
) -> AsyncIterator[bytes]:
    """Response events as tokens arrive: a reasoning item, then a message item, then function calls
    once they parse; ``: ping`` comments while idle; ``error`` if the generation fails after the
    stream began. ``start`` is the in-progress response; ``build`` makes the final one from the result."""
    seq = 0
    live_ids: dict[str, str] = {}  # item type -> id of the item opened while streaming

    def ev(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return sse({"type": kind, "sequence_number": seq - 1, **fields}, kind)

    def opened(kind: str, text: str) -> Iterator[bytes]:
        """Open the item for ``kind`` (if not yet open) and send ``text`` into it."""
        item_type = "reasoning" if kind == "reasoning" else "message"
        idx = list(live_ids).index(item_type) if item_type in live_ids else len(live_ids)
        if item_type not in live_ids:
            iid = live_ids[item_type] = new_id("rs_" if item_type == "reasoning" else "msg_")
            if item_type == "reasoning":
                item = {"id": iid, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
                yield ev("response.output_item.added", output_index=idx, item=item)
            else:
                item = {"id": iid, "type": "message", "role": "assistant", "content": [], "status": "in_progress"}
                yield ev("response.output_item.added", output_index=idx, item=item)
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield ev("response.content_part.added", item_id=iid, output_index=idx, content_index=0, part=part)
        iid = live_ids[item_type]
        if text and item_type == "reasoning":
            yield ev("response.reasoning_text.delta", item_id=iid, output_index=idx, content_index=0, delta=text)
        elif text:
            yield ev(
                "response.output_text.delta", item_id=iid, output_index=idx, content_index=0, delta=text, logprobs=[]
            )

    yield ev("response.created", response=start)
    yield ev("response.in_progress", response=start)
    async for kind, piece in live.deltas():
        if kind == "ping":
            yield b": ping\n\n"
        else:
            for event in opened(kind, piece):
                yield event
    try:
        res: ChatResult = await live.result()
    except ApiError as err:
        yield ev("error", code=err.code or err.kind, message=err.message, param=err.param)
        return
    final = build(res)
    reasoning_rest, content_rest = live.rest(res.reasoning, str(res.message.get("content") or ""))
    rests = {"reasoning": reasoning_rest, "message": content_rest}
    for idx, item in enumerate(final["output"]):
        kind = item["type"]
        if kind in ("reasoning", "message"):
            if kind in live_ids:
                item["id"] = live_ids[kind]
            for event in opened("reasoning" if kind == "reasoning" else "content", ""):
                yield event
            iid = item["id"]
            for piece in chunks(rests[kind]):
                for event in opened("reasoning" if kind == "reasoning" else "content", piece):
                    yield event
            if kind == "reasoning":
                text = item["content"][0]["text"]
                yield ev("response.reasoning_text.done", item_id=iid, output_index=idx, content_index=0, text=text)
            else:
                part = item["content"][0]
                yield ev(
                    "response.output_text.done",
                    item_id=iid,
                    output_index=idx,
                    content_index=0,
                    text=part["text"],
                    logprobs=part["logprobs"],
                )
                yield ev("response.content_part.done", item_id=iid, output_index=idx, content_index=0, part=part)
        else:
            iid = item["id"]
            yield ev(
                "response.output_item.added", output_index=idx, item={**item, "arguments": "", "status": "in_progress"}
            )
            for piece in chunks(item["arguments"]):
                yield ev("response.function_call_arguments.delta", item_id=iid, output_index=idx, delta=piece)
            yield ev(
                "response.function_call_arguments.done",
                item_id=iid,
                output_index=idx,
                name=item["name"],
                arguments=item["arguments"],
            )
        yield ev("response.output_item.done", output_index=idx, item=item)
    yield ev("response.completed", response=final)
