"""The Gemini API (``models/{model}:generateContent``): request schema, conversion to canonical
messages, responses and SSE.

Conversion: ``systemInstruction`` becomes a system message; a ``user`` turn's ``functionResponse``
parts become tool messages (in order, before the turn's text); a ``model`` turn's ``thought`` text
becomes ``reasoning_content`` and its ``functionCall`` parts become tool calls (``args``
JSON-encoded). Calls keep the ids the proxy returned, so the recorder splices the sampled tokens; a
``functionResponse`` without an ``id`` answers the previous model turn's first unanswered call of
its name. ``toolConfig.functionCallingConfig`` maps onto the canonical ``tool_choice`` (``AUTO``:
auto, ``NONE``: none, ``ANY``: required, or the one function ``allowedFunctionNames`` names);
``generationConfig.thinkingConfig`` onto the template's ``enable_thinking``. Every field is
honoured or refused with a 400 that names it. Field names are read in either spelling protobuf's
JSON mapping accepts (``maxOutputTokens`` or ``max_output_tokens``: Google's Python client sends
``thinkingConfig``'s fields in snake case).

Streaming (``:streamGenerateContent?alt=sse``): ``data:`` chunks of the response's own shape, text
and thought parts as the policy samples them, the last chunk with the function calls (or one empty
text part), the ``finishReason`` and ``usageMetadata``. Consecutive ``model`` contents in a request
are one reply (Google's Chat helpers keep each streamed chunk as its own content).

Keep-alive (sent when the stream is idle, from the moment it opens, before the first token too). An
SSE comment is not safe: google-genai's ``HttpResponse._iter_response_stream``
(``google/genai/_api_client.py``) feeds every line not starting with ``data: `` to a JSON buffer
and fails on ``: ping``; @google/genai's ``ApiClient.processStreamResponse`` (bundled in Gemini CLI
0.61.0) matches its ``responseLineRE`` (a ``data:`` line, then a blank line) at the start of its
buffer only, so a comment would hold back every later event. What both parse and skip is a ``data:`` chunk of the response's
shape with one empty text part: google-genai yields a chunk whose ``text`` is ``""`` (its Chat,
``chats._validate_response``, still counts the turn as valid); Gemini CLI's
``GeminiChat.processStreamResponse`` keeps no part of it (``isValidResponse``: an empty text part
is no content) and ``Turn.run`` emits no event for it; @google/genai's own Chat
(``isValidContent``) accepts it. An empty ``parts`` list would make both Chat helpers drop the
turn. An error after the stream began is written as raw JSON, ``{"error": ...}``, as Google's
server writes one: google-genai raises it from any line, @google/genai from a read that holds it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lego.proxies.errors import ApiError, error_body
from lego.proxies.service import ChatRequest, ChatResult
from lego.proxies.streaming import LiveReply
from lego.proxies.wire import (
    GEMINI_HOSTED,
    chunks,
    effort_thinking,
    new_id,
    refuse,
    refuse_fields,
    refuse_unknown,
    sse,
)

__all__ = ["INERT_FIELDS", "GenerateContentRequest", "generate_response", "generate_stream", "to_chat_request"]

# Fields that change nothing the policy samples: accepted as is.
ADVISORY_FIELDS = frozenset({"safetySettings", "labels"})
# Keys accepted on a part whatever they hold: none changes what the policy samples. Any other key of a
# content or part is a 400 naming its path, unless null or empty.
INERT_FIELDS = frozenset(
    {
        # An opaque signature over the model's reasoning, echoed back with the part it came on (Gemini
        # CLI puts a synthetic one on a turn's first functionCall); nothing a template renders.
        "thoughtSignature",
    }
)
_SMALLEST_TOP_P = 1e-9
_MODEL_PART_KEYS = frozenset({"text", "thought", "functionCall"})
_USER_PART_KEYS = frozenset({"text", "functionResponse"})
_GENERATION_FIELDS = frozenset(
    {
        "temperature",
        "topP",
        "topK",
        "maxOutputTokens",
        "stopSequences",
        "candidateCount",
        "responseMimeType",
        "thinkingConfig",
        "seed",
    }
)


def _camel(obj: Any) -> Any:
    """A message's field names in protobuf JSON's lowerCamelCase (the wire accepts snake_case too)."""
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        head, *rest = str(key).split("_")
        out[head + "".join(w[:1].upper() + w[1:] for w in rest)] = value
    return out


class Content(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str | None = None
    parts: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("parts"), list):
            data = {**data, "parts": [_camel(p) for p in data["parts"]]}
        return data


class GenerateContentRequest(BaseModel):
    """The body of ``generateContent`` / ``streamGenerateContent`` (the model is in the path)."""

    model_config = ConfigDict(extra="allow")
    contents: list[Content] = Field(min_length=1)
    systemInstruction: Content | None = None  # the wire's own (camelCase) names
    tools: list[dict[str, Any]] | None = None
    toolConfig: dict[str, Any] | None = None
    generationConfig: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: Any) -> Any:
        return _camel(data)


def _tools(tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Function declarations become canonical tools; Google's built-in tools (search, code execution)
    are left out and named (:data:`lego.proxies.wire.HOSTED_TOOLS`); anything else is a 400."""
    out = []
    dropped = []
    for i, tool in enumerate(tools or []):
        tool = _camel(tool)
        for key in tool:
            if key in GEMINI_HOSTED:
                dropped.append(key)
            elif key != "functionDeclarations":
                raise refuse(f"tools[{i}].{key}", "this tool cannot run here; declare functions")
        for j, decl in enumerate(tool.get("functionDeclarations") or []):
            where = f"tools[{i}].functionDeclarations[{j}]"
            decl = _camel(decl)
            refuse_fields(decl, where, frozenset({"name", "description", "parameters", "parametersJsonSchema"}))
            if not isinstance(decl.get("name"), str):
                raise ApiError(400, f"{where}: a function declaration needs a string 'name'", param=where)
            if "parameters" in decl and "parametersJsonSchema" in decl:
                raise refuse(f"{where}.parametersJsonSchema", "give either parameters or parametersJsonSchema")
            fn: dict[str, Any] = {"name": decl["name"]}
            if decl.get("description") is not None:
                fn["description"] = decl["description"]
            fn["parameters"] = _json_schema(
                decl.get("parametersJsonSchema") or decl.get("parameters") or {"type": "object", "properties": {}}
            )
            out.append({"type": "function", "function": fn})
    return out, dropped


def _json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-style schema (upper-case ``type`` names) as the JSON Schema templates render."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _tool_choice(config: dict[str, Any] | None, tools: list[dict[str, Any]]) -> Any:
    if not config:
        return None
    config = _camel(config)
    refuse_fields(config, "toolConfig", frozenset({"functionCallingConfig"}))
    fcc = _camel(config.get("functionCallingConfig") or {})
    where = "toolConfig.functionCallingConfig"
    refuse_fields(fcc, where, frozenset({"mode", "allowedFunctionNames"}))
    mode = str(fcc.get("mode") or "AUTO").upper()
    allowed = fcc.get("allowedFunctionNames")
    if allowed is not None and mode != "ANY":
        raise refuse(f"{where}.allowedFunctionNames", "allowed function names go with mode ANY only")
    if mode == "AUTO":
        return "auto"
    if mode == "NONE":
        return "none"
    if mode != "ANY":
        raise refuse(f"{where}.mode", f"unsupported mode {mode!r}; use AUTO, ANY or NONE")
    if not allowed:
        return "required"
    if len(allowed) == 1:
        return {"type": "function", "function": {"name": allowed[0]}}
    names = {t["function"]["name"] for t in tools}
    if set(allowed) == names:
        return "required"
    unknown = sorted(set(allowed) - names)
    if unknown:
        raise refuse(f"{where}.allowedFunctionNames", f"{unknown} are not among the declared functions")
    # several of the declared functions: a call of one of them, enforced like OpenAI's allowed_tools
    tools_of = [{"type": "function", "function": {"name": str(n)}} for n in allowed]
    return {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": tools_of}}


class _Ranges(BaseModel):
    """The ranges the Gemini API documents for ``generationConfig``'s sampling fields."""

    model_config = ConfigDict(extra="ignore")
    temperature: float | None = Field(None, ge=0, le=2)
    topP: float | None = Field(None, ge=0, le=1)
    topK: int | None = Field(None, ge=0)
    maxOutputTokens: int | None = Field(None, ge=1)
    stopSequences: list[str] | None = Field(None, max_length=5)
    seed: int | None = None


def _checked(g: dict[str, Any]) -> _Ranges:
    """``g``'s sampling fields, or a 400 naming the first that is out of range (Gemini's error has no
    ``param``: the message names it)."""
    try:
        return _Ranges.model_validate(g)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "generationConfig." + ".".join(str(x) for x in first["loc"])
        raise ApiError(400, f"{where}: {first['msg']} (got {first.get('input')!r})", param=where) from exc


def _generation(config: dict[str, Any] | None) -> dict[str, Any]:
    """ChatRequest keyword arguments from ``generationConfig``."""
    g = _camel(config or {})
    refuse_fields(g, "generationConfig", _GENERATION_FIELDS)
    ranges = _checked(g)
    if g.get("candidateCount") not in (None, 1):
        raise refuse("generationConfig.candidateCount", "only one candidate is sampled per call")
    if g.get("responseMimeType") not in (None, "text/plain"):
        raise refuse("generationConfig.responseMimeType", "structured output is not enforced by this proxy")
    out: dict[str, Any] = {
        "temperature": ranges.temperature,
        # topP 0 keeps only the most likely token: the smallest nucleus there is
        "top_p": None if ranges.topP is None else max(ranges.topP, _SMALLEST_TOP_P),
        "top_k": ranges.topK,
        "max_tokens": ranges.maxOutputTokens,
        "stop": list(ranges.stopSequences or []),
        "seed": ranges.seed,
        "chat_template_kwargs": {},
    }
    thinking = _camel(g.get("thinkingConfig"))
    if thinking is not None:
        where = "generationConfig.thinkingConfig"
        refuse_fields(thinking, where, frozenset({"thinkingBudget", "includeThoughts", "thinkingLevel"}))
        budget, level = thinking.get("thinkingBudget"), thinking.get("thinkingLevel")
        if level is not None:
            out["chat_template_kwargs"] = effort_thinking(str(level).lower(), f"{where}.thinkingLevel")
        elif budget is not None:
            # 0 turns thinking off, -1 (dynamic) or a positive budget on; how long stays the model's choice.
            out["chat_template_kwargs"] = {"enable_thinking": budget != 0}
    return out


def include_thoughts(req: GenerateContentRequest) -> bool:
    """Whether the reply carries the policy's reasoning as ``thought`` parts (unless turned off)."""
    thinking = _camel(_camel(req.generationConfig or {}).get("thinkingConfig") or {})
    return thinking.get("includeThoughts") is not False


def _text(content: Content, where: str) -> str:
    texts = []
    for j, part in enumerate(content.parts):
        refuse_fields(part, f"{where}.parts[{j}]", frozenset({"text"}), INERT_FIELDS)
        texts.append(str(part.get("text", "")))
    return "\n".join(texts)


def _model_turn(content: Content, where: str, turn: int) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(content.parts):
        at = f"{where}.parts[{j}]"
        refuse_fields(part, at, _MODEL_PART_KEYS, INERT_FIELDS)
        if "functionCall" in part:
            call = part["functionCall"]
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ApiError(400, f"{at}.functionCall needs a string 'name'", param=f"{at}.functionCall")
            refuse_fields(call, f"{at}.functionCall", frozenset({"id", "name", "args"}))
            args = json.dumps(call.get("args") or {}, ensure_ascii=False)
            call_id = str(call.get("id") or f"call_{turn}_{len(calls)}")
            calls.append({"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": args}})
        elif part.get("thought"):
            thoughts.append(str(part.get("text", "")))
        else:
            texts.append(str(part.get("text", "")))
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        out["reasoning_content"] = "".join(thoughts)
    if calls:
        out["tool_calls"] = calls
    return out


def _joined(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two consecutive model turns as one assistant message (text, reasoning and calls in order)."""
    out: dict[str, Any] = {"role": "assistant", "content": first["content"] + second["content"]}
    if reasoning := first.get("reasoning_content", "") + second.get("reasoning_content", ""):
        out["reasoning_content"] = reasoning
    if calls := [*first.get("tool_calls", []), *second.get("tool_calls", [])]:
        out["tool_calls"] = calls
    return out


def _user_turn(content: Content, where: str, open_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts = []
    for j, part in enumerate(content.parts):
        at = f"{where}.parts[{j}]"
        refuse_fields(part, at, _USER_PART_KEYS, INERT_FIELDS)
        if "functionResponse" in part:
            fr = part["functionResponse"]
            if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
                raise ApiError(400, f"{at}.functionResponse needs a string 'name'", param=f"{at}.functionResponse")
            refuse_fields(fr, f"{at}.functionResponse", frozenset({"id", "name", "response"}))
            call_id = fr.get("id")
            if call_id is None:  # answers the first unanswered call of that name
                match = next((c for c in open_calls if c["function"]["name"] == fr["name"]), None)
                if match is None:
                    raise ApiError(400, f"{at}.functionResponse: no call of {fr['name']!r} to answer")
                call_id = match["id"]
            open_calls[:] = [c for c in open_calls if c["id"] != call_id]
            response = fr.get("response")
            body = response if isinstance(response, str) else json.dumps(response or {}, ensure_ascii=False)
            out.append({"role": "tool", "tool_call_id": str(call_id), "content": body})
        else:
            texts.append(str(part.get("text", "")))
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def to_chat_request(req: GenerateContentRequest, model: str, stream: bool) -> ChatRequest:
    refuse_unknown(req.model_extra, ADVISORY_FIELDS)
    messages: list[dict[str, Any]] = []
    if req.systemInstruction is not None:
        messages.append({"role": "system", "content": _text(req.systemInstruction, "systemInstruction")})
    open_calls: list[dict[str, Any]] = []
    previous: str | None = None
    for i, content in enumerate(req.contents):
        where = f"contents[{i}]"
        refuse_fields(content.model_extra or {}, where, frozenset())
        if content.role == "model":
            turn = _model_turn(content, where, i)
            if previous == "model":  # one reply in several contents (Google's Chat keeps each streamed chunk)
                turn = _joined(messages.pop(), turn)
            open_calls = list(turn.get("tool_calls") or [])
            messages.append(turn)
        elif content.role in (None, "user", "function"):
            messages.extend(_user_turn(content, where, open_calls))
        else:
            raise ApiError(400, f"{where}: unknown role {content.role!r}; use user or model", param=f"{where}.role")
        previous = content.role
    tools, dropped = _tools(req.tools)
    return ChatRequest(
        messages=messages,
        tools=tools,
        dropped_tools=dropped,
        tool_choice=_tool_choice(req.toolConfig, tools),
        stream=stream,
        model=model,
        **_generation(req.generationConfig),
    )


def _args_of(arguments: Any) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _call_parts(res: ChatResult) -> list[dict[str, Any]]:
    return [
        {"functionCall": {"id": c["id"], "name": c["function"]["name"], "args": _args_of(c["function"]["arguments"])}}
        for c in res.message.get("tool_calls") or []
    ]


def _finish(res: ChatResult) -> str:
    return "MAX_TOKENS" if res.finish_reason == "length" else "STOP"


def _usage(res: ChatResult) -> dict[str, int]:
    return {
        "promptTokenCount": res.prompt_tokens,
        "candidatesTokenCount": res.completion_tokens,
        "totalTokenCount": res.prompt_tokens + res.completion_tokens,
    }


def _chunk(parts: list[dict[str, Any]], model: str, response_id: str, **candidate: Any) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0, **candidate}],
        "modelVersion": model,
        "responseId": response_id,
    }


def generate_response(res: ChatResult, model: str, thoughts: bool) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if res.reasoning and thoughts:
        parts.append({"text": res.reasoning, "thought": True})
    if res.reply_content():
        parts.append({"text": res.reply_content()})
    parts += _call_parts(res)
    body = _chunk(parts, model, res.id, finishReason=_finish(res))
    body["usageMetadata"] = _usage(res)
    return body


# The keep-alive: a chunk of the response's own shape holding one empty text part. Google's clients parse
# every chunk and skip this one (see the module docstring); ``parts: []`` would also be skipped by
# Gemini CLI, but Google's Chat helpers would count the whole turn as invalid and drop it from history.
_EMPTY_TEXT = [{"text": ""}]


async def generate_stream(live: LiveReply, model: str, thoughts: bool) -> AsyncIterator[bytes]:
    """Response chunks as tokens arrive; an empty-text chunk while idle; the last chunk holds the
    function calls (or an empty text), finish reason and usage; a raw ``{"error": ...}`` JSON if the
    generation fails after the stream began."""
    response_id = new_id("")

    def part(kind: str, piece: str) -> list[dict[str, Any]]:
        if kind == "reasoning":
            return [{"text": piece, "thought": True}] if thoughts else []
        return [{"text": piece}]

    async for kind, piece in live.deltas():
        if kind == "ping":
            yield sse(_chunk(_EMPTY_TEXT, model, response_id))
        elif parts := part(kind, piece):
            yield sse(_chunk(parts, model, response_id))
    try:
        res: ChatResult = await live.result()
    except ApiError as err:
        # Raw JSON, as Google's server writes an error mid-stream: google-genai raises it from any
        # line it reads, and @google/genai's processStreamResponse only from a read that is not an SSE event.
        yield json.dumps(error_body("gemini", err), ensure_ascii=False).encode() + b"\n"
        return
    reasoning, content = live.rest(res.reasoning, res.reply_content())
    for kind, rest in (("reasoning", reasoning), ("content", content)):
        for piece in chunks(rest):
            if parts := part(kind, piece):
                yield sse(_chunk(parts, model, response_id))
    last = _chunk(_call_parts(res) or _EMPTY_TEXT, model, response_id, finishReason=_finish(res))
    last["usageMetadata"] = _usage(res)
    yield sse(last)
