"""OpenAI Responses replies: the response object and its SSE events (see
:mod:`lego.proxies.openai_responses`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from lego.proxies.errors import ApiError
from lego.proxies.responses_request import ResponsesRequest, tool_namespaces
from lego.proxies.service import ChatResult
from lego.proxies.streaming import LiveReply
from lego.proxies.wire import (
    chunks,
    new_id,
    sse,
)

__all__ = ["in_progress", "responses_response", "responses_stream"]


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
        "output": _items(res, tool_namespaces(req.tools)),
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
    stream began. ``start`` is the in-progress response; ``build`` makes the final one from the result.

    One id and one ``output_index`` per item, from ``output_item.added`` through ``.done`` to the
    completed response's ``output`` (the SDK's stream helper checks it): an item opened while
    streaming keeps the id and place it was opened with; text held back (it looked like a tool
    call) opens its item at the end, under the id the final response gives it."""
    seq = 0
    opened_items: dict[str, tuple[str, int]] = {}  # item type -> (id, output_index), in the order opened

    def ev(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return sse({"type": kind, "sequence_number": seq - 1, **fields}, kind)

    def opened(item_type: str, text: str, iid: str | None = None) -> Iterator[bytes]:
        """Open the ``item_type`` item (under ``iid``, else a new id) if it is not yet open; send ``text`` into it."""
        if item_type not in opened_items:
            opened_items[item_type] = (iid or new_id("rs_" if item_type == "reasoning" else "msg_"), len(opened_items))
            iid, idx = opened_items[item_type]
            if item_type == "reasoning":
                item = {"id": iid, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
                yield ev("response.output_item.added", output_index=idx, item=item)
            else:
                item = {"id": iid, "type": "message", "role": "assistant", "content": [], "status": "in_progress"}
                yield ev("response.output_item.added", output_index=idx, item=item)
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield ev("response.content_part.added", item_id=iid, output_index=idx, content_index=0, part=part)
        iid, idx = opened_items[item_type]
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
            for event in opened("reasoning" if kind == "reasoning" else "message", piece):
                yield event
    try:
        res: ChatResult = await live.result()
    except ApiError as err:
        yield ev("error", code=err.code or err.kind, message=err.message, param=err.param)
        return
    final = build(res)
    reasoning_rest, content_rest = live.rest(res.reasoning, str(res.message.get("content") or ""))
    rests = {"reasoning": reasoning_rest, "message": content_rest}
    final["output"] = _in_stream_order(final["output"], opened_items, rests)
    for idx, item in enumerate(final["output"]):
        kind = item["type"]
        if kind in ("reasoning", "message"):
            if kind in opened_items:
                item["id"] = opened_items[kind][0]
            for event in opened(kind, "", item["id"]):
                yield event
            iid = item["id"]
            for piece in chunks(rests[kind]):
                for event in opened(kind, piece):
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


def _in_stream_order(
    items: list[dict[str, Any]], live: dict[str, tuple[str, int]], rests: dict[str, str]
) -> list[dict[str, Any]]:
    """The final output with the items opened while streaming first, at the places they were opened
    in, then the others in their own order. An item opened live that the final reply lacks (nothing
    of it left to say) is closed with the text it streamed, so no opened item is left unfinished."""
    first = []
    for kind, _ in sorted(live.items(), key=lambda kv: kv[1][1]):
        match = next((it for it in items if it["type"] == kind), None)
        if match is None:
            text = rests.get(kind, "")
            if kind == "reasoning":
                match = {
                    "type": "reasoning",
                    "id": "",
                    "summary": [],
                    "status": "completed",
                    "content": [{"type": "reasoning_text", "text": text}],
                }
            else:
                part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                match = {"type": "message", "id": "", "status": "completed", "role": "assistant", "content": [part]}
        first.append(match)
    return first + [it for it in items if all(it is not f for f in first)]
