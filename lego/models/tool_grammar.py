"""The language of a forced tool call, as a regular expression an engine can decode under.

A forcing ``tool_choice`` promises a call of the named tool whose arguments are valid against its
JSON schema. The proxy forces the call's opening as text (the prompt ends with it) and asks the
engine to sample the rest under :func:`call_regex`: the arguments, then the call's closing, in the
model's own tool-call format. One string serves both engines: the in-process engine compiles it
(:mod:`lego.engines.guided`), vLLM takes it as ``structured_outputs.regex``.

The regex uses a small, portable dialect (what :mod:`lego.engines.guided` parses and what
xgrammar / outlines accept): literals with ``\\`` escapes, ``\\n``, ``\\xHH``, ``\\uHHHH``, classes
``[...]`` / ``[^...]`` with ranges, ``(?:...)``, ``|``, ``*``, ``+``, ``?``, ``{m,n}``; no
anchors, lookarounds or backreferences.

What the language is (a subset of what the schema allows, so every call it admits is valid):

- JSON (``hermes``): the declared properties only, in the schema's order, the required ones always,
  optional ones optional (a schema-less object takes any members); one optional space after ``:`` and ``,``; strings never contain ``</`` (a ``<tool_call>``
  parser would end the call there; ``<\\/`` is the JSON spelling of it); free-form values nest at
  most :data:`FREE_DEPTH` deep.
- XML (``qwen3_coder``): ``<parameter=NAME>\\nVALUE\\n</parameter>\\n`` per property, VALUE bare text
  for a string parameter (no ``</``), compact JSON otherwise, as the template renders them.

Supported schema keywords: ``type`` (one or a list), ``properties``, ``required``, ``items``,
``minItems`` / ``maxItems``, ``enum``, ``const``, ``anyOf`` / ``oneOf``, a one-member ``allOf``,
local ``$ref`` (``#/$defs/...``, ``#/definitions/...``), ``additionalProperties`` (a schema-less
object). Ignored (the value may fall outside them): string ``pattern`` / ``format`` /
``minLength`` / ``maxLength`` and numeric bounds.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FREE_DEPTH", "call_regex", "escape", "value_regex"]

FREE_DEPTH = 2
"""How deep a schema-less (free-form) JSON value may nest."""

_META = set("\\^$.|?*+()[]{}")
_ESC = r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})'
_PLAIN = r'[^"\\<\x00-\x1f]'
_AFTER_LT = r'(?:[^"\\</\x00-\x1f]|' + _ESC + ")"
# A JSON string whose text never holds "</": a run of '<' is followed by a character other than '/'
# or ends the string.
STRING = '"(?:' + _PLAIN + "|" + _ESC + "|<+" + _AFTER_LT + ')*<*"'
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+\-]?[0-9]+)?"
INTEGER = r"-?(?:0|[1-9][0-9]*)"
_XML_TEXT = r"(?:[^<]|<+[^</])*<*"
_COLON, _COMMA = ":[ ]?", ",[ ]?"


def escape(text: str) -> str:
    """``text`` as a regex that matches exactly it (in the dialect above)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _META:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def _alt(options: list[str]) -> str:
    unique = list(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


def _free(depth: int) -> str:
    """Any JSON value nesting at most ``depth`` containers deep."""
    scalars = [STRING, NUMBER, "true", "false", "null"]
    if depth <= 0:
        return _alt(scalars)
    inner = _free(depth - 1)
    array = r"\[(?:" + inner + "(?:" + _COMMA + inner + r")*)?\]"
    pair = STRING + _COLON + inner
    obj = r"\{(?:" + pair + "(?:" + _COMMA + pair + r")*)?\}"
    return _alt([*scalars, array, obj])


def _ordered(pairs: list[tuple[str, bool]], sep: str) -> str:
    """A ``sep``-separated subsequence of ``pairs`` (in order) holding every required one."""
    memo: dict[tuple[int, bool], str] = {}

    def rest(i: int, first: bool) -> str:
        if (i, first) in memo:
            return memo[i, first]
        if i == len(pairs):
            out = ""
        else:
            pair, required = pairs[i]
            take = ("" if first else sep) + pair + rest(i + 1, False)
            out = take if required else "(?:" + take + "|" + rest(i + 1, first) + ")"
        memo[i, first] = out
        return out

    return rest(0, True)


class _Schema:
    """Resolves local ``$ref`` against the root schema while building regexes."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, schema: Any, seen: frozenset[str] = frozenset()) -> tuple[dict[str, Any], frozenset[str]]:
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            if ref in seen or not ref.startswith("#/"):
                return {}, seen  # recursive or remote: any value
            seen = seen | {ref}
            node: Any = self.root
            for part in ref[2:].split("/"):
                node = node.get(part, {}) if isinstance(node, dict) else {}
            schema = node
        return (schema if isinstance(schema, dict) else {}), seen

    def value(self, schema: Any, seen: frozenset[str] = frozenset()) -> str:
        s, seen = self.resolve(schema, seen)
        if "const" in s:
            return escape(json.dumps(s["const"], ensure_ascii=False))
        if isinstance(s.get("enum"), list) and s["enum"]:
            return _alt([escape(json.dumps(v, ensure_ascii=False)) for v in s["enum"]])
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list) and s[key]:
                return _alt([self.value(sub, seen) for sub in s[key]])
        if isinstance(s.get("allOf"), list) and len(s["allOf"]) == 1:
            return self.value({**{k: v for k, v in s.items() if k != "allOf"}, **s["allOf"][0]}, seen)
        types = s.get("type")
        if isinstance(types, list):
            return _alt([self.value({**s, "type": t}, seen) for t in types])
        if types is None:
            if "properties" in s:
                types = "object"
            elif "items" in s:
                types = "array"
            else:
                return _free(FREE_DEPTH)
        return self._typed(str(types), s, seen)

    def _typed(self, kind: str, s: dict[str, Any], seen: frozenset[str]) -> str:
        if kind == "string":
            return STRING
        if kind == "integer":
            return INTEGER
        if kind == "number":
            return NUMBER
        if kind == "boolean":
            return "(?:true|false)"
        if kind == "null":
            return "null"
        if kind == "array":
            item = self.value(s.get("items", {}), seen)
            lo = max(0, int(s.get("minItems") or 0))
            hi = s.get("maxItems")
            if isinstance(hi, int) and hi == 0:
                return r"\[\]"
            more = "(?:" + _COMMA + item + ")"
            tail_lo, tail_hi = max(0, lo - 1), (None if not isinstance(hi, int) else hi - 1)
            quant = (
                "*"
                if (tail_lo, tail_hi) == (0, None)
                else "{" + f"{tail_lo},{'' if tail_hi is None else tail_hi}" + "}"
            )
            body = item + more + quant
            return r"\[" + (body if lo else "(?:" + body + ")?") + r"\]"
        if kind == "object":
            props = s.get("properties")
            if not isinstance(props, dict):  # a schema-less object: any members, unless none are allowed
                return _free(max(1, FREE_DEPTH)) if s.get("additionalProperties", True) is not False else r"\{\}"
            if not props:  # declared with no properties: a tool without parameters
                return r"\{\}"
            required = set(s.get("required") or [])
            pairs = [
                (escape(json.dumps(name, ensure_ascii=False)) + _COLON + self.value(sub, seen), name in required)
                for name, sub in props.items()
            ]
            return r"\{" + _ordered(pairs, _COMMA) + r"\}"
        return _free(FREE_DEPTH)

    def xml_parameters(self, schema: Any) -> str:
        """qwen3_coder: one ``<parameter=...>`` block per property, in order, the required ones always."""
        s, seen = self.resolve(schema)
        props: dict[str, Any] = s["properties"] if isinstance(s.get("properties"), dict) else {}
        required = set(s.get("required") or [])
        blocks = []
        for name, sub in props.items():
            resolved, _ = self.resolve(sub, seen)
            kind = resolved.get("type")
            text = kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)
            choices = resolved.get("enum") if "const" not in resolved else [resolved["const"]]
            if text and isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
                value = _alt([escape(c) for c in choices])  # a string parameter is written bare
            else:
                value = _XML_TEXT if text else self.value(sub, seen)
            block = escape(f"<parameter={name}>\n") + value + escape("\n</parameter>\n")
            blocks.append((block, name in required))
        return _ordered(blocks, "")


def value_regex(schema: dict[str, Any]) -> str:
    """The JSON text of a value valid against ``schema`` (the subset described in the module docstring)."""
    return _Schema(schema).value(schema)


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function", tool)
    params = fn.get("parameters")
    return params if isinstance(params, dict) else {"type": "object", "properties": {}}


def call_regex(fmt: str, tools: list[dict[str, Any]], wanted: str) -> str:
    """What follows the forced opening of a call in tool-call format ``fmt`` (``hermes`` or
    ``qwen3_coder``; see :func:`lego.proxies.tool_choice.forced_prefix`): the arguments of tool
    ``wanted`` and the call's closing -- or, with ``wanted == ""``, the name of one of ``tools``
    first. Raises ValueError for another format."""
    by_name = {str(t.get("function", t).get("name")): t for t in tools}
    names = [wanted] if wanted else list(by_name)
    if fmt == "hermes":
        close = escape("}\n</tool_call>")
        bodies = {n: value_regex(_parameters(by_name[n])) for n in names}
        if wanted:
            return bodies[wanted] + close
        head = {n: escape(json.dumps(n, ensure_ascii=False)[1:] + ', "arguments": ') for n in names}
        return _alt([head[n] + bodies[n] for n in names]) + close
    if fmt == "qwen3_coder":
        close = escape("</function>\n</tool_call>")
        bodies = {n: _Schema(_parameters(by_name[n])).xml_parameters(_parameters(by_name[n])) for n in names}
        if wanted:
            return bodies[wanted] + close
        return _alt([escape(n + ">\n") + bodies[n] for n in names]) + close
    raise ValueError(f"no forced-call grammar for the {fmt!r} tool-call format; use hermes or qwen3_coder")
