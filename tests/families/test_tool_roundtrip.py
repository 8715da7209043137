"""Render -> parse round trips of each family's tool-call format on its real tokenizer, and the
refusals: a template that cannot express tools, a tokenizer without a template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from lego.errors import ChatFormatError, ModelError
from lego.models.chat import ChatFormat
from lego.models.families import Family, family
from tests.families.conftest import require

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "view",
            "description": "Show a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]
PROMPT = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix calc.py, please."}]


def _fetched(tokenizer: str) -> Path:
    return require(Family(tokenizer, tokenizer, "", "", "")).tokenizer_dir()


def _call(name: str, args: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _chat(family: Family) -> ChatFormat:
    return ChatFormat(AutoTokenizer.from_pretrained(str(family.tokenizer_dir())), family.template())


def _sampled_text(chat: ChatFormat, assistant: dict[str, Any]) -> list[int]:
    """The ids the template writes for ``assistant`` after the generation prompt: what a model that
    follows its template samples (its end-of-turn / stop token included)."""
    before = chat.render_text(PROMPT, TOOLS, add_generation_prompt=True)
    after = chat.render_text([*PROMPT, assistant], TOOLS)
    assert after.startswith(before), "the generation prompt is not a prefix of the rendered assistant turn"
    ids = chat.encode(after[len(before) :])
    ends = (chat.end_of_turn_id, *chat.eos_token_ids)
    last = max(i for i, t in enumerate(ids) if t in ends)
    ids = ids[: last + 1]  # what the template puts after the turn's end (a newline) is not sampled
    if ids[-1] not in chat.eos_token_ids:
        # harmony: history closes a final answer with <|end|>, the model ends one with <|return|>
        ids[-1] = chat.tokenizer.convert_tokens_to_ids("<|return|>")
    return ids


def test_the_parser_is_picked_from_the_template(family: Family) -> None:
    chat = _chat(family)
    assert chat.tool_call_format == family.tool_parser
    assert chat.supports_tools
    assert chat.eos_token_ids and chat.end_of_turn_id not in (None, chat.tokenizer.unk_token_id)
    assert chat.render(PROMPT, TOOLS, add_generation_prompt=True) == chat.tokenizer.apply_chat_template(
        PROMPT, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False, chat_template=chat.template
    )


@pytest.mark.parametrize(
    "calls",
    [
        [("bash", {"command": "pytest -q tests/test_calc.py", "timeout": 60})],
        [("view", {"path": "calc.py"})],
    ],
    ids=["int-and-string-args", "one-arg"],
)
def test_a_rendered_tool_call_parses_back(family: Family, calls: list[tuple[str, dict[str, Any]]]) -> None:
    chat = _chat(family)
    assistant = {"role": "assistant", "content": "", "tool_calls": [_call(n, a, i) for i, (n, a) in enumerate(calls)]}
    ids = _sampled_text(chat, assistant)
    parsed = chat.parse(ids, TOOLS)
    assert parsed.parse_errors == []
    assert parsed.finished, f"the rendered turn does not end on a stop id: {chat.decode(ids[-3:])!r}"
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == calls
    assert parsed.content == ""


def test_a_rendered_answer_parses_back_as_content(family: Family) -> None:
    chat = _chat(family)
    parsed = chat.parse(_sampled_text(chat, {"role": "assistant", "content": "The bug is fixed."}), TOOLS)
    assert (parsed.content, parsed.tool_calls, parsed.parse_errors, parsed.finished) == (
        "The bug is fixed.",
        [],
        [],
        True,
    )


def test_templates_without_tools_are_refused_for_tool_use_naming_the_fix() -> None:
    for name in ("llama3_1", "deepseek_v3"):
        chat = ChatFormat(AutoTokenizer.from_pretrained(str(_fetched(name))))
        assert not chat.supports_tools
        chat.render(PROMPT)  # plain chat still works
        with pytest.raises(ChatFormatError, match=r"cannot express tools.*--chat-template FILE"):
            chat.render(PROMPT, TOOLS)


def test_a_tokenizer_without_template_needs_one_supplied() -> None:
    tok = AutoTokenizer.from_pretrained(str(_fetched("gptoss")))
    with pytest.raises(ModelError, match=r"no chat template.*--chat-template FILE"):
        ChatFormat(tok)


def test_reasoning_round_trips_where_the_format_has_it() -> None:
    chat = _chat(require(family("gpt-oss")))
    assistant = {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Look at calc.py first.",
        "tool_calls": [_call("view", {"path": "calc.py"})],
    }
    parsed = chat.parse(_sampled_text(chat, assistant), TOOLS)
    assert parsed.reasoning == "Look at calc.py first."
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("view", {"path": "calc.py"})]
