"""Formats without a tool-capable template among the fetched tokenizers (DeepSeek-V3's shipped
template writes no tool schemas; no Mistral or GLM tokenizer is fetched): their parsers on text in
the shape those models write, written here from the formats' descriptions."""

from __future__ import annotations

import json

import pytest

from lego.models.tool_parsers import PARSERS, detect_parser, parse_completion_text

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            },
        },
    }
]
WANT = [("bash", {"command": "ls -la", "timeout": 5}), ("bash", {"command": "pwd", "timeout": 1})]

CASES = {
    "deepseek_v3": (
        "Let me look.<｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n```json\n{"command": "ls -la", "timeout": 5}\n```<｜tool▁call▁end｜>'
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n```json\n{"command": "pwd", "timeout": 1}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>"
    ),
    "mistral": 'Let me look.[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}, '
    '{"name": "bash", "arguments": {"command": "pwd", "timeout": 1}}]',
    "glm": "<think>hm</think>Let me look.<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls -la</arg_value>\n"
    "<arg_key>timeout</arg_key>\n<arg_value>5</arg_value>\n</tool_call><tool_call>bash\n"
    "<arg_key>command</arg_key>\n<arg_value>pwd</arg_value>\n<arg_key>timeout</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_each_format_parses_its_calls_and_keeps_the_text(fmt: str) -> None:
    parsed = parse_completion_text(CASES[fmt], finished=True, tools=TOOLS, parser=fmt)
    assert parsed.parse_errors == []
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == WANT
    assert parsed.content == "Let me look."
    assert len({c.id for c in parsed.tool_calls}) == 2


def test_mistral_newer_form_with_args_marker() -> None:
    parsed = parse_completion_text(
        '[TOOL_CALLS]bash[ARGS]{"command": "ls -la", "timeout": 5}', True, TOOLS, parser="mistral"
    )
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == WANT[:1]


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_broken_call_is_kept_as_text_with_an_error(fmt: str) -> None:
    broken = CASES[fmt].replace('"timeout": 5}', '"timeout": 5').replace("<arg_value>5</arg_value>", "<arg_value>5")
    parsed = parse_completion_text(broken, finished=True, tools=TOOLS, parser=fmt)
    assert parsed.parse_errors and "kept as text" in parsed.parse_errors[0]
    assert "ls -la" in parsed.content


def test_the_format_is_detected_from_template_markers() -> None:
    assert detect_parser("{{ '<tool_call>' + name + '<arg_key>' }}") == "glm"
    assert detect_parser("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert detect_parser("{{ '<｜tool▁call▁begin｜>' }}") == "deepseek_v3"
    assert detect_parser("<|start_header_id|>{{ m }}<|eot_id|>") == "llama3_json"
    assert set(PARSERS) >= {"hermes", "qwen3_coder", "llama3_json", "harmony", "deepseek_v3", "mistral", "glm"}


def test_an_unknown_parser_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown tool parser 'xml'; use one of deepseek_v3, glm"):
        parse_completion_text("x", True, parser="xml")
