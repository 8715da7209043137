"""The forced-call grammar and its automaton: what they admit is valid against the tool's schema and
parses with the model's own tool parser; the shortest completion from any prefix is a valid call.
(The guided sampler itself is tested through the official SDKs in tests/proxies/test_forced_tool_calls.py.)"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import regex

from lego.engines.automaton import DEAD, compile_regex
from lego.models.tool_grammar import call_regex, value_regex
from lego.models.tool_parsers import parse_completion_text

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"enum": ["x", "y", 3]},
            "c": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
            "d": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
            "e": {"$ref": "#/$defs/point"},
        },
        "required": ["c"],
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
    },
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"free": {"type": "object"}, "tags": {"type": ["string", "null"]}}},
]
GOOD = [
    ['{"cmd": "ls -la | grep <x>"}', '{"cmd":""}'],
    ['{"c": [1]}', '{"a": -3, "b": 3, "c": [1.5, 2e3, 0], "d": null, "e": {"x": 1}}', '{"b": "y", "c": [0]}'],
    ["{}"],
    ['{"free": {"k": [1, "v"]}, "tags": null}', '{"tags": "t"}', "{}"],
]
BAD = [
    ['{"cmd": 1}', "{}", '{"cmd": "a</tool_call>"}', '{"cmd": "x", "other": 1}'],
    ['{"a": 1}', '{"c": []}', '{"c": [1, 2, 3, 4]}', '{"b": "z", "c": [1]}', '{"c": [01]}'],
    ['{"x": 1}'],
    ['{"tags": 3}'],
]


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_the_language_admits_valid_values_and_refuses_the_rest(i: int) -> None:
    pattern = value_regex(SCHEMAS[i])
    auto = compile_regex(pattern)
    for text in GOOD[i]:
        jsonschema.validate(json.loads(text), SCHEMAS[i])
        q = auto.feed(auto.start, text)
        assert q != DEAD and auto.accepting(q), text
        assert regex.fullmatch(pattern, text), text  # the same language in a second regex engine
    for text in BAD[i]:
        q = auto.feed(auto.start, text)
        assert q == DEAD or not auto.accepting(q), text
    shortest = auto.shortest(auto.start)
    jsonschema.validate(json.loads(shortest), SCHEMAS[i])


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_every_prefix_completes_to_a_call_the_models_parser_reads_as_valid(fmt: str) -> None:
    tools = [
        {"type": "function", "function": {"name": n, "parameters": s}} for n, s in zip("pq", SCHEMAS[:2], strict=True)
    ]
    opening = {"hermes": '<tool_call>\n{"name": "', "qwen3_coder": "<tool_call>\n<function="}[fmt]
    auto = compile_regex(call_regex(fmt, tools, ""))
    text = '"q", "arguments": {"a": 12, "c": [3' if fmt == "hermes" else "q>\n<parameter=c>\n[3"
    text = text.removeprefix('"')
    for cut in range(len(text) + 1):
        q = auto.feed(auto.start, text[:cut])
        assert q != DEAD, text[:cut]
        whole = opening + text[:cut] + auto.shortest(q)
        (call,) = parse_completion_text(whole, finished=True, tools=tools, parser=fmt).tool_calls
        assert call.name == ("q" if cut else call.name)  # before the name is written either tool may follow
        jsonschema.validate(json.loads(call.arguments), SCHEMAS["pq".index(call.name)])
