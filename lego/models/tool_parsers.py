"""Parse generated assistant text into content, reasoning and tool calls (Qwen3 families).

Two tool-call forms exist in the wild and both are always recognised, block by block:

- hermes (Qwen3, Qwen2.5): ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``
- qwen3-coder XML: ``<tool_call>\\n<function=f>\\n<parameter=p>\\nvalue\\n</parameter>\\n</function>\\n</tool_call>``

A block that cannot be parsed is never dropped: it stays, verbatim, in ``content`` and a message
in ``parse_errors`` says what was wrong, so the harness sees what the policy wrote and the trainer
can count format errors.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, Field

__all__ = ["ParsedCompletion", "ToolCall", "make_call_id", "parse_completion_text", "split_reasoning"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)
_FUNCTION = re.compile(r"^<function=([^>\n]+)>(.*?)</function>$", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


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


def parse_completion_text(
    text: str, finished: bool, tools: list[dict[str, Any]] | None = None, id_salt: str = ""
) -> ParsedCompletion:
    """Parse decoded generation text (the final eos already removed) into a ParsedCompletion."""
    reasoning, rest = split_reasoning(text)
    types = _schema_types(tools)
    calls: list[ToolCall] = []
    errors: list[str] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(rest):
        kept.append(rest[pos : match.start()])
        pos = match.end()
        try:
            name, args = _parse_block(match.group(1), types)
        except ValueError as exc:
            errors.append(f"tool call {len(calls) + len(errors)}: {exc}; kept as text")
            kept.append(match.group(0))
            continue
        arguments = json.dumps(args, ensure_ascii=False)
        calls.append(
            ToolCall(id=make_call_id(id_salt + text, len(calls), name, arguments), name=name, arguments=arguments)
        )
    tail = rest[pos:]
    if CALL_OPEN in tail:
        errors.append("unterminated <tool_call> (the generation stopped before </tool_call>); kept as text")
    kept.append(tail)
    return ParsedCompletion(
        text=text,
        content="".join(kept).strip(),
        reasoning=reasoning,
        tool_calls=calls,
        parse_errors=errors,
        finished=finished,
    )
