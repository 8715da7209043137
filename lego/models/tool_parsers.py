"""Parse generated assistant text into content, reasoning and tool calls: one parser per format.

``PARSERS`` maps a format name to its parser; :func:`detect_parser` picks one from a chat
template's markers (a setting, ``engine.tool_parser``, overrides it). The formats (as the model
families write them; vLLM ships a parser for each):

- ``hermes`` (Qwen3, Qwen2.5) and ``qwen3_coder`` (Qwen3-Coder): ``<tool_call>`` blocks holding
  JSON or ``<function=f><parameter=p>`` XML; both forms are recognised, block by block;
- ``llama3_json`` (Llama 3.x): the whole reply is ``{"name": f, "parameters": {...}}`` (optionally
  after ``<|python_tag|>``, several joined by ``;``);
- ``harmony`` (gpt-oss): channels -- ``analysis`` is reasoning, ``final`` is content, a
  ``commentary to=functions.f`` message is a tool call;
- ``deepseek_v3``: ``<｜tool▁calls▁begin｜>`` ... ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>f``
  plus a fenced JSON block per call;
- ``mistral``: ``[TOOL_CALLS]`` followed by a JSON list of ``{"name", "arguments"}`` (or, in newer
  templates, ``[TOOL_CALLS]f[ARGS]{...}`` per call);
- ``glm`` (GLM-4.5/4.6): ``<tool_call>f`` then ``<arg_key>k</arg_key><arg_value>v</arg_value>`` pairs.

A block that cannot be parsed is never dropped: it stays, verbatim, in ``content`` and a message
in ``parse_errors`` says what was wrong, so the harness sees what the policy wrote and the trainer
can count format errors.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "PARSERS",
    "ParsedCompletion",
    "ToolCall",
    "detect_parser",
    "make_call_id",
    "parse_completion_text",
    "split_reasoning",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)
_FUNCTION = re.compile(r"^<function=([^>\n]+)>(.*?)</function>$", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)
Tools = list[dict[str, Any]] | None


class ToolCall(BaseModel):
    """One parsed tool call; ``arguments`` is a JSON object as a string (OpenAI's convention)."""

    id: str
    name: str
    arguments: str = "{}"


class ParsedCompletion(BaseModel):
    """What a generation means as a chat message."""

    text: str = Field(description="The decoded generation (special tokens kept, the final eos removed).")
    content: str = Field(description="Text outside <think> and outside successfully parsed tool calls.")
    reasoning: str | None = Field(None, description="The <think> block's text, if any.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_errors: list[str] = Field(default_factory=list)
    finished: bool = Field(False, description="The generation ended on an end-of-turn/eos token.")


def make_call_id(salt: str, index: int, name: str, arguments: str) -> str:
    """A deterministic id: same completion, same ids; ``index`` keeps calls within one completion apart."""
    digest = hashlib.sha256(f"{salt}\0{index}\0{name}\0{arguments}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Split ``<think>...</think>`` off the front of ``text``: ``(reasoning, rest)``.

    A missing ``<think>`` before ``</think>`` is accepted (Qwen3 templates may put ``<think>`` in
    the generation prompt). An unclosed ``<think>`` means the generation stopped while thinking:
    everything after it is reasoning and the content is empty.
    """
    stripped = text.lstrip()
    close = text.find(THINK_CLOSE)
    if close >= 0:
        before = text[:close].lstrip()
        if before.startswith(THINK_OPEN):
            before = before[len(THINK_OPEN) :]
        return before.strip("\n"), text[close + len(THINK_CLOSE) :]
    if stripped.startswith(THINK_OPEN):
        return stripped[len(THINK_OPEN) :].strip("\n"), ""
    return None, text


def _schema_types(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """tool name -> {parameter name -> JSON-schema type} from OpenAI tool dicts."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        fn = tool.get("function", tool)
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[str(fn.get("name"))] = {k: (v or {}).get("type") for k, v in props.items() if isinstance(v, dict)}
    return out


def _convert_xml_value(raw: str, typ: Any) -> Any:
    """Qwen3-coder writes strings bare and other values as JSON; the tool schema says which."""
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    if typ is None or typ == "string" or (isinstance(typ, list) and "string" in typ):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value  # the schema said non-string but the model wrote text; keep what it wrote


def _parse_block(body: str, types: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Return (name, arguments) or raise ValueError saying why the block is malformed."""
    body = body.strip()
    if body.startswith("<function="):
        match = _FUNCTION.match(body)
        if not match:
            raise ValueError("qwen3-coder call without a matching </function>")
        name = match.group(1).strip()
        params = types.get(name, {})
        args = {k.strip(): _convert_xml_value(v, params.get(k.strip())) for k, v in _PARAMETER.findall(match.group(2))}
        leftover = _PARAMETER.sub("", match.group(2)).strip()
        if leftover:
            raise ValueError(f"unexpected text inside <function={name}>: {leftover[:60]!r}")
        return name, args
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"tool call is not valid JSON ({exc.msg} at char {exc.pos})") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise ValueError('tool call JSON needs a string "name"')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            raise ValueError(f'"arguments" of {obj["name"]} is a string that is not JSON') from exc
    if not isinstance(args, dict):
        raise ValueError(f'"arguments" of {obj["name"]} must be a JSON object, got {type(args).__name__}')
    return obj["name"], args


Call = tuple[str, dict[str, Any]]


@dataclass
class _Parts:
    """What a format parser found: reasoning, the content left as text, calls, and errors."""

    reasoning: str | None
    content: str
    calls: list[Call]
    errors: list[str]


def _json_object_args(name: str, args: Any) -> dict[str, Any]:
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments of {name} are a string that is not JSON") from exc
    if not isinstance(args, dict):
        raise ValueError(f"the arguments of {name} must be a JSON object, got {type(args).__name__}")
    return args


def _parse_tagged(text: str, tools: Tools) -> _Parts:
    """hermes / qwen3_coder: ``<tool_call>`` blocks (JSON or XML inside), after an optional <think>."""
    reasoning, rest = split_reasoning(text)
    types = _schema_types(tools)
    calls: list[Call] = []
    errors: list[str] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(rest):
        kept.append(rest[pos : match.start()])
        pos = match.end()
        try:
            calls.append(_parse_block(match.group(1), types))
        except ValueError as exc:
            errors.append(f"tool call {len(calls) + len(errors)}: {exc}; kept as text")
            kept.append(match.group(0))
    tail = rest[pos:]
    if CALL_OPEN in tail:
        errors.append("unterminated <tool_call> (the generation stopped before </tool_call>); kept as text")
    kept.append(tail)
    return _Parts(reasoning, "".join(kept).strip(), calls, errors)


def _parse_llama3_json(text: str, tools: Tools) -> _Parts:
    """Llama 3.x: a reply that is one JSON call (or several joined by ';') is a tool call."""
    reasoning, rest = split_reasoning(text)
    body = rest.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>") :].strip()
    if not body.startswith("{"):
        return _Parts(reasoning, rest.strip(), [], [])
    decoder = json.JSONDecoder()
    calls: list[Call] = []
    pos = 0
    try:
        while pos < len(body):
            obj, end = decoder.raw_decode(body, pos)
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                raise ValueError('a Llama tool call is a JSON object with a string "name"')
            args = obj.get("parameters", obj.get("arguments", {}))
            calls.append((obj["name"], _json_object_args(obj["name"], args)))
            pos = end
            while pos < len(body) and body[pos] in " \n\t;":
                pos += 1
    except (json.JSONDecodeError, ValueError) as exc:
        if not calls and isinstance(exc, json.JSONDecodeError):
            return _Parts(reasoning, rest.strip(), [], [])  # prose that happens to start with '{'
        return _Parts(reasoning, rest.strip(), [], [f"Llama JSON tool call: {exc}; kept as text"])
    return _Parts(reasoning, "", calls, [])


_HARMONY_MSG = re.compile(
    r"(?:<\|start\|>assistant)?<\|channel\|>(\w+)([^<]*?)(?:<\|constrain\|>\w+)?<\|message\|>(.*?)(?:<\|end\|>|<\|call\|>|<\|return\|>|$)",
    re.DOTALL,
)


def _parse_harmony(text: str, tools: Tools) -> _Parts:
    """gpt-oss harmony: analysis -> reasoning, final -> content, ``commentary to=functions.f`` -> call."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[Call] = []
    errors: list[str] = []
    pos = 0
    for match in _HARMONY_MSG.finditer(text):
        content.append(text[pos : match.start()].strip())
        pos = match.end()
        channel, header, body = match.group(1), match.group(2), match.group(3)
        recipient = re.search(r"to=functions\.([^\s<]+)", header)
        if recipient:
            name = recipient.group(1)
            try:
                calls.append((name, _json_object_args(name, json.loads(body) if body.strip() else {})))
            except (json.JSONDecodeError, ValueError) as exc:
                errors.append(f"harmony call to {name}: {exc}; kept as text")
                content.append(match.group(0))
        elif channel == "analysis":
            reasoning.append(body)
        else:
            content.append(body)
    content.append(text[pos:].strip())
    return _Parts("\n".join(reasoning) if reasoning else None, "".join(c for c in content if c).strip(), calls, errors)


_DS_CALLS = re.compile(r"<｜tool▁calls▁begin｜>(.*?)(?:<｜tool▁calls▁end｜>|$)", re.DOTALL)
_DS_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(\w+)<｜tool▁sep｜>([^\n]+)\n```(?:json)?\n(.*?)\n```\s*<｜tool▁call▁end｜>", re.DOTALL
)


def _parse_deepseek_v3(text: str, tools: Tools) -> _Parts:
    """DeepSeek-V3: a tool-calls block of calls, each a name and a fenced JSON object."""
    reasoning, rest = split_reasoning(text)
    block = _DS_CALLS.search(rest)
    if block is None:
        return _Parts(reasoning, rest.strip(), [], [])
    calls: list[Call] = []
    try:
        for match in _DS_CALL.finditer(block.group(1)):
            name = match.group(2).strip()
            calls.append((name, _json_object_args(name, json.loads(match.group(3)))))
    except (json.JSONDecodeError, ValueError) as exc:
        return _Parts(reasoning, rest.strip(), [], [f"DeepSeek tool call: {exc}; kept as text"])
    if not calls:
        return _Parts(reasoning, rest.strip(), [], ["DeepSeek tool-calls block without a complete call; kept as text"])
    return _Parts(reasoning, (rest[: block.start()] + rest[block.end() :]).strip(), calls, [])


def _parse_mistral(text: str, tools: Tools) -> _Parts:
    """Mistral: ``[TOOL_CALLS]`` then a JSON list, or ``[TOOL_CALLS]f[ARGS]{...}`` per call."""
    reasoning, rest = split_reasoning(text)
    marker = rest.find("[TOOL_CALLS]")
    if marker < 0:
        return _Parts(reasoning, rest.strip(), [], [])
    head, body = rest[:marker], rest[marker:]
    calls: list[Call] = []
    try:
        for piece in body.split("[TOOL_CALLS]")[1:]:
            if "[ARGS]" in piece:
                name, args = piece.split("[ARGS]", 1)
                calls.append((name.strip(), _json_object_args(name.strip(), json.loads(args))))
                continue
            items = json.loads(piece)
            for item in items if isinstance(items, list) else [items]:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise ValueError('each Mistral tool call needs a string "name"')
                calls.append((item["name"], _json_object_args(item["name"], item.get("arguments", {}))))
    except (json.JSONDecodeError, ValueError) as exc:
        return _Parts(reasoning, rest.strip(), [], [f"Mistral tool call: {exc}; kept as text"])
    return _Parts(reasoning, head.strip(), calls, [])


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _parse_glm(text: str, tools: Tools) -> _Parts:
    """GLM-4.5: ``<tool_call>f`` + key/value pairs; values typed by the tool schema like qwen3_coder."""
    reasoning, rest = split_reasoning(text)
    types = _schema_types(tools)
    calls: list[Call] = []
    errors: list[str] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(rest):
        kept.append(rest[pos : match.start()])
        pos = match.end()
        body = match.group(1)
        name = body.split("<arg_key>", 1)[0].strip()
        leftover = _GLM_ARG.sub("", body[body.find(name) + len(name) :]).strip()
        if not name or "\n" in name or leftover:
            errors.append(
                f"GLM tool call {len(calls) + len(errors)}: not a name followed by <arg_key>/<arg_value> pairs; kept as text"
            )
            kept.append(match.group(0))
            continue
        params = types.get(name, {})
        calls.append(
            (name, {k.strip(): _convert_xml_value(v, params.get(k.strip())) for k, v in _GLM_ARG.findall(body)})
        )
    kept.append(rest[pos:])
    return _Parts(reasoning, "".join(kept).strip(), calls, errors)


PARSERS: dict[str, Callable[[str, Tools], _Parts]] = {
    "hermes": _parse_tagged,
    "qwen3_coder": _parse_tagged,
    "llama3_json": _parse_llama3_json,
    "harmony": _parse_harmony,
    "deepseek_v3": _parse_deepseek_v3,
    "mistral": _parse_mistral,
    "glm": _parse_glm,
}
"""Tool-call format name -> parser (``engine.tool_parser`` takes one of these names)."""

# Template markers, most specific first: the first marker found in a chat template names its format.
_MARKERS = (
    ("<arg_key>", "glm"),
    ("<function=", "qwen3_coder"),
    ("<tool_call>", "hermes"),
    ("<|channel|>", "harmony"),
    ("tool▁call▁begin", "deepseek_v3"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|eot_id|>", "llama3_json"),
)


def detect_parser(template: str) -> str:
    """The tool-call format a chat template writes, from its markers; 'hermes' when none is found."""
    return next((name for marker, name in _MARKERS if marker in template), "hermes")


def parse_completion_text(
    text: str, finished: bool, tools: Tools = None, id_salt: str = "", parser: str = "hermes"
) -> ParsedCompletion:
    """Parse decoded generation text (the final eos already removed) with the named format's parser."""
    if parser not in PARSERS:
        raise ValueError(f"unknown tool parser {parser!r}; use one of {', '.join(sorted(PARSERS))}")
    parts = PARSERS[parser](text, tools)
    calls = []
    for i, (name, args) in enumerate(parts.calls):
        arguments = json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(id=make_call_id(id_salt + text, i, name, arguments), name=name, arguments=arguments))
    return ParsedCompletion(
        text=text,
        content=parts.content,
        reasoning=parts.reasoning,
        tool_calls=calls,
        parse_errors=parts.errors,
        finished=finished,
    )
