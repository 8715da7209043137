"""ChatFormat: rendering equals the tokenizer's own template, is prefix-stable, and parsing inverts it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from transformers import AutoTokenizer

from lego.errors import ChatFormatError
from lego.models.chat import ChatFormat
from lego.models.tiny import chat_template

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace",
            "description": "Replace text in a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old": {"type": "string"},
                    "new": {"type": "string"},
                    "count": {"type": "integer"},
                    "dry_run": {"type": "boolean"},
                },
            },
        },
    },
]


def _call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "The test test_truncate fails. Fix it."},
    {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "Read the file first.",
        "tool_calls": [_call("c1", "bash", {"command": "cat src/core.py"})],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "def truncate(text, limit): ..."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            _call("c2", "str_replace", {"path": "src/core.py", "old": "<", "new": "<=", "count": 1, "dry_run": False}),
            _call("c3", "bash", {"command": "pytest -q"}),
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "replaced 1"},
    {"role": "tool", "tool_call_id": "c3", "content": "12 passed in 0.05s"},
    {"role": "assistant", "content": "Fixed: `<=` instead of `<`."},
    {"role": "user", "content": "Thanks ünïcode ✓"},
]


@pytest.fixture(scope="module")
def coder_format(tiny_model_dir) -> ChatFormat:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = chat_template("qwen3_coder")
    return ChatFormat(tok)


def test_attributes(chat_format: ChatFormat, coder_format: ChatFormat) -> None:
    tok = chat_format.tokenizer
    assert chat_format.im_end_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert chat_format.eos_token_ids == [chat_format.im_end_id, tok.convert_tokens_to_ids("<|endoftext|>")]
    assert chat_format.tool_call_format == "hermes"
    assert coder_format.tool_call_format == "qwen3_coder"


@pytest.mark.parametrize("fmt", ["hermes", "coder"])
def test_render_equals_tokenizer_template(fmt, chat_format, coder_format) -> None:
    cf = chat_format if fmt == "hermes" else coder_format
    messages = copy.deepcopy(CONVERSATION)
    # The tokenizer's own rendering, with arguments decoded as chat pipelines pass them.
    own = copy.deepcopy(messages)
    for m in own:
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    for gen in (False, True):
        expected = cf.tokenizer.apply_chat_template(
            own, tools=TOOLS, add_generation_prompt=gen, tokenize=True, return_dict=False
        )
        assert cf.render(messages, TOOLS, add_generation_prompt=gen) == list(expected)
        assert cf.render(messages, TOOLS, add_generation_prompt=gen) == cf.encode(cf.render_text(messages, TOOLS, gen))
    assert messages == CONVERSATION, "rendering must not mutate the caller's messages"


def test_rendering_shows_tools_think_and_grouped_tool_results(chat_format: ChatFormat) -> None:
    text = chat_format.render_text(CONVERSATION, TOOLS)
    assert text.startswith("<|im_start|>system\nYou are a careful coding agent.\n\n# Tools")
    assert '<tools>\n{"type": "function", "function": {"name": "bash"' in text
    assert "<think>\nRead the file first.\n</think>\n\nLet me look.\n<tool_call>\n" in text
    assert (
        '<tool_call>\n{"name": "bash", "arguments": {"command": "cat src/core.py"}}\n</tool_call><|im_end|>\n' in text
    )
    # two consecutive tool results share one user turn
    assert (
        "<|im_start|>user\n<tool_response>\nreplaced 1\n</tool_response>\n<tool_response>\n12 passed in 0.05s\n"
        "</tool_response><|im_end|>\n"
    ) in text


@pytest.mark.parametrize("fmt", ["hermes", "coder"])
def test_prefix_stable(fmt, chat_format, coder_format) -> None:
    """Rendering messages[:k] is a prefix of messages[:k+1], except inside a group of tool results."""
    cf = chat_format if fmt == "hermes" else coder_format
    for k in range(1, len(CONVERSATION)):
        if CONVERSATION[k]["role"] == "tool" and CONVERSATION[k - 1]["role"] == "tool":
            continue  # consecutive tool results share one turn (as in Qwen3); requests never end mid-group
        shorter = cf.render_text(CONVERSATION[:k], TOOLS)
        longer = cf.render_text(CONVERSATION[: k + 1], TOOLS)
        assert longer.startswith(shorter), k
        ids_short, ids_long = cf.render(CONVERSATION[:k], TOOLS), cf.render(CONVERSATION[: k + 1], TOOLS)
        assert ids_long[: len(ids_short)] == ids_short, k


def test_generation_prompt_ids(chat_format: ChatFormat) -> None:
    gp = chat_format.generation_prompt_ids(CONVERSATION, TOOLS)
    assert chat_format.decode(gp) == "<|im_start|>assistant\n"
    assert chat_format.render(CONVERSATION, TOOLS) + gp == chat_format.render(
        CONVERSATION, TOOLS, add_generation_prompt=True
    )


@pytest.mark.parametrize("fmt", ["hermes", "coder"])
def test_parse_inverts_render(fmt, chat_format, coder_format) -> None:
    """Render each assistant turn, parse its sampled part back: same content, reasoning and calls."""
    cf = chat_format if fmt == "hermes" else coder_format
    for i, message in enumerate(CONVERSATION):
        if message["role"] != "assistant":
            continue
        before = cf.render(CONVERSATION[:i], TOOLS, add_generation_prompt=True)
        after = cf.render(CONVERSATION[: i + 1], TOOLS)
        assert after[: len(before)] == before
        sampled = after[len(before) : -1]  # drop the template's trailing "\n"; ends on <|im_end|>
        parsed = cf.parse(sampled, tools=TOOLS)
        assert parsed.finished and not parsed.parse_errors
        assert parsed.content == message["content"]
        assert parsed.reasoning == message.get("reasoning_content")
        want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])]
        assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == want
        assert len({c.id for c in parsed.tool_calls}) == len(parsed.tool_calls)
        # and the parsed message renders back to the same tokens
        again = cf.render([*CONVERSATION[:i], cf.to_message(parsed)], TOOLS)
        assert again == after


def test_parse_is_deterministic_and_marks_unfinished(chat_format: ChatFormat) -> None:
    ids = chat_format.encode('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>')
    a, b = chat_format.parse(ids), chat_format.parse(ids)
    assert a.tool_calls[0].id == b.tool_calls[0].id and a.tool_calls[0].id.startswith("call_")
    assert not a.finished
    assert chat_format.parse(ids, id_salt="turn-2").tool_calls[0].id != a.tool_calls[0].id


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call>', "not valid JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', 'needs a string "name"'),
        ('<tool_call>\n{"name": "bash", "arguments": [1]}\n</tool_call>', "must be a JSON object"),
        ("<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>", "</function>"),
        ('<tool_call>\n{"name": "bash", "arguments": {"command": "l', "unterminated <tool_call>"),
    ],
)
def test_malformed_tool_calls_are_reported_and_kept(chat_format: ChatFormat, text: str, error: str) -> None:
    parsed = chat_format.parse([*chat_format.encode("Trying. " + text), chat_format.im_end_id])
    assert parsed.tool_calls == []
    assert len(parsed.parse_errors) == 1 and error in parsed.parse_errors[0]
    assert parsed.content == "Trying. " + text, "the raw text must stay visible"


def test_good_call_survives_next_to_a_bad_one(chat_format: ChatFormat) -> None:
    text = (
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n<tool_call>\n{oops}\n</tool_call>'
    )
    parsed = chat_format.parse(chat_format.encode(text))
    assert [c.name for c in parsed.tool_calls] == ["bash"]
    assert parsed.content == "<tool_call>\n{oops}\n</tool_call>"
    assert len(parsed.parse_errors) == 1


def test_reasoning_without_open_tag_and_unclosed_think(chat_format: ChatFormat) -> None:
    parsed = chat_format.parse(chat_format.encode("plan it\n</think>\n\nDone."))
    assert (parsed.reasoning, parsed.content) == ("plan it", "Done.")
    parsed = chat_format.parse(chat_format.encode("<think>\nstill thinking"))
    assert (parsed.reasoning, parsed.content) == ("still thinking", "")


def test_assistant_mask_covers_exactly_the_assistant_turns(chat_format: ChatFormat) -> None:
    ids, mask = chat_format.assistant_mask(CONVERSATION, TOOLS)
    assert len(ids) == len(mask) and ids == chat_format.render(CONVERSATION, TOOLS)
    masked = chat_format.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert masked.count("<|im_end|>") == 3
    assert "Fixed: `<=` instead of `<`.<|im_end|>" in masked
    assert "<|im_start|>" not in masked and "tool_response" not in masked and "Fix it." not in masked


def test_bad_messages_raise_chat_format_error(chat_format: ChatFormat) -> None:
    with pytest.raises(ChatFormatError, match="empty conversation"):
        chat_format.render([])
    bad = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "bash", "arguments": "{nope"}}],
        }
    ]
    with pytest.raises(ChatFormatError, match="not valid JSON"):
        chat_format.render(bad)


def test_content_parts_and_none_are_accepted(chat_format: ChatFormat) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert chat_format.render_text(parts) == chat_format.render_text([{"role": "user", "content": "ab"}])
    assert "<|im_start|>assistant\n<|im_end|>" in chat_format.render_text([{"role": "assistant", "content": None}])
