"""OpenAI Responses requests: the schema, what is refused, and conversion of input items to
canonical messages (see :mod:`lego.proxies.openai_responses`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lego.proxies.errors import ApiError
from lego.proxies.service import ChatRequest
from lego.proxies.wire import (
    IMAGE_PART_TYPES,
    OPENAI_HOSTED,
    effort_thinking,
    refuse,
    refuse_fields,
    refuse_unknown,
    says_nothing,
    text_of_parts,
)

__all__ = [
    "ADVISORY_FIELDS",
    "INERT_FIELDS",
    "ResponsesRequest",
    "input_messages",
    "to_chat_request",
    "tool_namespaces",
]


# Fields that change nothing the policy samples (ids, storage and cache hints): accepted as is.
ADVISORY_FIELDS = frozenset(
    {"store", "user", "safety_identifier", "service_tier", "prompt_cache_key", "client_metadata"}
)
# Keys accepted on an input item or a content part whatever they hold: none changes what the policy samples.
# Any other key of an item or part is a 400 naming its path, unless null or empty.
INERT_FIELDS = frozenset(
    {
        "id",  # an item's id, echoed back with the item (Codex sends every item with one)
        "status",  # an item's completion status, echoed back with it
        "annotations",  # citations over an output_text part's `text`, which is what renders
        "logprobs",  # an output_text part's sampled-token logprobs, echoed back as this proxy sent them
        "namespace",  # the namespace a function_call's tool was declared in, as this proxy answered it
        "summary",  # a reasoning item's display summary; the reasoning itself is its `content`
        # Codex's opaque per-message metadata for OpenAI's own backend (sent when it believes it talks
        # to api.openai.com, i.e. under interception): bookkeeping, never rendered into the prompt
        "internal_chat_message_metadata_passthrough",
    }
)
_ITEM_KEYS = {
    "message": frozenset({"type", "role", "content"}),
    "function_call": frozenset({"type", "call_id", "name", "arguments"}),
    "function_call_output": frozenset({"type", "call_id", "output"}),
    "reasoning": frozenset({"type", "content"}),
}
_REASONING_PART_KEYS = frozenset({"type", "text"})
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


def tool_namespaces(tools: list[dict[str, Any]] | None) -> dict[str, str]:
    """Function name -> the namespace it was declared in (for the function_call items answered)."""
    return {str(t.get("name")): ns for ns, t in _flatten(tools) if ns}


def _tools(tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Function tools (namespaced ones included) become canonical tools; hosted tools (web search ...)
    are left out and named (:data:`lego.proxies.wire.HOSTED_TOOLS`); any other type is a 400."""
    out = []
    dropped = []
    for i, (_, t) in enumerate(_flatten(tools)):
        if t.get("type") in OPENAI_HOSTED:
            dropped.append(str(t["type"]))
            continue
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
    return out, dropped


def _content_text(content: Any, where: str, field: str = "content") -> str:
    if isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES:
                raise ApiError(400, f"{where}.{field}[{j}]: images are unsupported; send text only")
    return text_of_parts(content, where, INERT_FIELDS, field)


def _reasoning_text(content: Any, where: str) -> str:
    """The text of a reasoning item's ``reasoning_text`` parts."""
    if says_nothing(content):
        return ""
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a list of reasoning_text parts", param=f"{where}.content")
    texts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(part, dict) or part.get("type") != "reasoning_text" or not isinstance(part.get("text"), str):
            raise ApiError(400, f"{at}: a reasoning item's content holds reasoning_text parts", param=at)
        refuse_fields(part, at, _REASONING_PART_KEYS, INERT_FIELDS)
        texts.append(part["text"])
    return "".join(texts)


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
        if kind not in _ITEM_KEYS:
            raise ApiError(400, f"{where}: unsupported input item type {kind!r}")
        refuse_fields(item, where, _ITEM_KEYS[kind], INERT_FIELDS)
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
            if text := _reasoning_text(item.get("content"), where):
                t = turn()
                t["reasoning_content"] = t.get("reasoning_content", "") + text
            continue
        else:
            if not isinstance(item.get("call_id"), str):
                raise ApiError(400, f"{where}: a function_call_output item needs a string 'call_id'")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": _content_text(item.get("output"), where, "output"),
                }
            )
        open_turn = None
    return out


def to_chat_request(req: ResponsesRequest, history: list[dict[str, Any]] | None = None) -> ChatRequest:
    """``history``: the conversation of ``previous_response_id`` (without its system message)."""
    _refuse_unsupported(req)
    messages = input_messages(req.input, req.instructions)
    if history:
        lead = messages[:1] if messages and messages[0]["role"] == "system" and req.instructions else []
        messages = [*lead, *history, *messages[len(lead) :]]
    tools, dropped = _tools(req.tools)
    return ChatRequest(
        messages=messages,
        tools=tools,
        dropped_tools=dropped,
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
