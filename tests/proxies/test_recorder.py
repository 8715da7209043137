"""The pure segment recorder with the real chat format (no server, no engine): O(new messages)
delta rendering gives exactly the template's own tokens, closing tokens are mask 0, and rewrites /
retries / threads behave as DESIGN.md says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lego.proxies.recorder import SessionRecorder
from lego.types import Generation, MainThreadSpec

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _turn(
    rec: SessionRecorder, chat: Any, messages: list[dict[str, Any]], text: str, tools: Any = TOOLS, salt: str = ""
) -> tuple[Any, dict[str, Any]]:
    call = rec.render(messages, tools)
    ids = chat.encode(text)
    gen = Generation(
        token_ids=ids,
        logprobs=[-0.25] * len(ids),
        finish_reason="stop" if ids[-1] in chat.eos_token_ids else "length",
        policy_version=3,
    )
    msg = chat.to_message(chat.parse(ids, tools, id_salt=salt or str(len(messages))))
    rec.commit(call, gen, msg)
    return call, msg


def test_windowed_rendering_equals_the_templates_own_tokens(chat_format: Any) -> None:
    rec = SessionRecorder(chat_format)
    two_calls = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "pwd"}}\n</tool_call><|im_end|>'
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    _, msg = _turn(rec, chat_format, messages, two_calls)
    ids = [c["id"] for c in msg["tool_calls"]]
    messages += [
        msg,
        {"role": "tool", "tool_call_id": ids[0], "content": "a"},
        {"role": "tool", "tool_call_id": ids[1], "content": "/w"},
    ]
    _, msg = _turn(rec, chat_format, messages, "<think>\nhm\n</think>\n\nnow what?<|im_end|>")
    messages += [msg, {"role": "user", "content": "continue"}, {"role": "system", "content": "reminder"}]
    call, msg = _turn(rec, chat_format, messages, "ok then")  # no end-of-turn sampled: closed with mask 0
    (seg,) = rec.segments()
    assert call.mode == "extend" and rec.counters["template_unstable"] == 0
    snapshot, _ = rec.snapshot()
    assert seg.input_ids == chat_format.render(snapshot, TOOLS)
    tail = chat_format.encode("<|im_end|>\n")
    assert seg.response_ids[-len(tail) :] == tail and seg.response_mask[-len(tail) :] == [0] * len(tail)
    assert all(v == 3 for v, m in zip(seg.response_versions, seg.response_mask, strict=True) if m)
    assert all(
        v is None and lp is None
        for v, lp, m in zip(seg.response_versions, seg.response_logprobs, seg.response_mask, strict=True)
        if not m
    )


def test_a_generation_that_spans_a_weight_swap_keeps_each_tokens_version(chat_format: Any) -> None:
    """The engine swapped weights mid-generation (versions 3 then 4): the segment carries the
    boundary token by token, and a retried generation keeps it in the discarded record too."""
    rec = SessionRecorder(chat_format)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    ids = chat_format.encode("partial rollout<|im_end|>")
    versions = [3] * 2 + [4] * (len(ids) - 2)
    for _ in range(2):  # the second is an exact retry: the first generation is discarded
        call = rec.render(messages, None)
        gen = Generation(token_ids=ids, logprobs=[-0.5] * len(ids), versions=versions, finish_reason="stop")
        rec.commit(call, gen, chat_format.to_message(chat_format.parse(ids, None)))
    (seg,) = rec.segments()
    assert [v for v, m in zip(seg.response_versions, seg.response_mask, strict=True) if m] == versions
    (discarded,) = rec.discarded
    assert discarded.policy_version == 3 and discarded.versions == versions


def test_render_changes_nothing_until_commit(chat_format: Any) -> None:
    rec = SessionRecorder(chat_format)
    messages = [{"role": "user", "content": "hi"}]
    _turn(rec, chat_format, messages, "hello<|im_end|>", tools=None)
    before = rec.segments()
    rec.render([{"role": "user", "content": "something else entirely"}], None)  # a rewrite whose generation fails
    assert rec.segments() == before and rec.counters["rewrites"] == 0


def test_interleaved_calls_with_different_template_kwargs_each_render_with_their_own(chat_format: Any) -> None:
    """Template kwargs travel with the call: rendering another thread's call between a render and its
    commit (two harness threads of one session) changes neither's recording."""
    rec = SessionRecorder(chat_format)
    quiet, thinking = {"enable_thinking": False}, {"enable_thinking": True}
    main = [{"role": "system", "content": "main"}, {"role": "user", "content": "fix it"}]
    side = [{"role": "system", "content": "title"}, {"role": "user", "content": "name it"}]
    call_main = rec.render(main, None, quiet)
    call_side = rec.render(side, None, thinking)
    for call in (call_side, call_main):
        ids = chat_format.encode("ok<|im_end|>")
        gen = Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop", policy_version=1)
        rec.commit(call, gen, {"role": "assistant", "content": "ok"})
    assert call_main.template_kwargs == quiet and call_side.template_kwargs == thinking
    (seg_side,) = rec.segments()  # committed first: the main thread
    (other,) = rec.side_threads()
    (seg_main,) = other.segments
    assert seg_side.prompt_ids == chat_format.render(side, None, True, thinking)
    assert seg_main.prompt_ids == chat_format.render(main, None, True, quiet)
    assert seg_side.prompt_ids[-3:] != seg_main.prompt_ids[-3:]  # the kwargs do change the rendering
    nxt = rec.render([*main, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}], None, quiet)
    assert nxt.mode == "extend"


def test_tools_change_is_another_thread_and_side_threads_are_not_exported(chat_format: Any) -> None:
    rec = SessionRecorder(chat_format)
    main = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    for i in range(2):
        _, msg = _turn(rec, chat_format, main, f"step {i}<|im_end|>")
        main += [msg, {"role": "user", "content": f"next {i}"}]
    _turn(
        rec,
        chat_format,
        [{"role": "system", "content": "agent"}, {"role": "user", "content": "title?"}],
        "A title<|im_end|>",
        tools=None,
    )
    assert len(rec.threads) == 2 and rec.summary_counters()["side_calls"] == 1
    (seg,) = rec.segments()
    assert "A title" not in chat_format.decode(seg.input_ids)


def test_history_truncated_to_an_earlier_boundary_reuses_its_tokens_in_a_new_segment(chat_format: Any) -> None:
    rec = SessionRecorder(chat_format)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    history = []
    for i in range(3):
        _, msg = _turn(rec, chat_format, messages, f"step {i}<|im_end|>")
        messages += [msg, {"role": "user", "content": f"next {i}"}]
        history.append(list(messages))
    first = rec.segments()[0]
    call, _ = _turn(rec, chat_format, [*history[0][:4], {"role": "user", "content": "edited"}], "redo<|im_end|>")
    assert call.mode == "new_segment"
    old, new = rec.segments()
    assert old == first
    # The kept prefix (through the first assistant turn) is the very same token ids.
    shared = len(chat_format.render(history[0][:3], TOOLS))
    assert new.input_ids[:shared] == first.input_ids[:shared]


def test_tools_growing_mid_conversation_continue_the_thread_as_a_new_segment(chat_format: Any) -> None:
    rec = SessionRecorder(chat_format)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    _, msg = _turn(rec, chat_format, messages, "step 0<|im_end|>")
    messages += [msg, {"role": "user", "content": "go on"}]
    more_tools = [
        *TOOLS,
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}},
    ]
    call, _ = _turn(rec, chat_format, messages, "step 1<|im_end|>", tools=more_tools)
    assert call.mode == "new_segment" and len(rec.threads) == 1
    assert len(rec.segments()) == 2 and rec.counters["rewrites"] == 1 and rec.summary_counters()["side_calls"] == 0


def _claude_code(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A Claude Code request body as the proxy's Anthropic route hands it to the recorder."""
    from lego.proxies.anthropic_messages import MessagesRequest, to_chat_request

    req = to_chat_request(MessagesRequest.model_validate(body))
    return req.messages, req.tools


def test_claude_codes_real_main_request_is_the_main_thread_over_its_small_model_calls(chat_format: Any) -> None:
    """The captured first request of Claude Code 2.1.332 (system prompt + its tool set) against the
    side calls it sends to the same session: a quota probe before it and a title call after it.
    Each thread has one generation, so only identity can pick the main one."""
    fixture = Path(__file__).parents[1] / "harnesses" / "fixtures" / "claude_code_2.1.332_first_request.json"
    body = json.loads(fixture.read_text())["body"]
    main, main_tools = _claude_code(body)
    probe, _ = _claude_code({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]})
    title, _ = _claude_code(
        {
            "model": "m",
            "max_tokens": 32,
            "system": [*body["system"][:1], {"type": "text", "text": "Generate a concise title for this session."}],
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    declared = MainThreadSpec(system_contains="You are a Claude agent, built on Anthropic's Claude Agent SDK.")
    for spec in (None, declared):
        rec = SessionRecorder(chat_format, main_thread=spec)
        _turn(rec, chat_format, probe, "ok<|im_end|>", tools=None)
        _turn(rec, chat_format, main, "I will look at the repo.<|im_end|>", tools=main_tools)
        _turn(rec, chat_format, title, "Greeting<|im_end|>", tools=None)
        (seg,) = rec.segments()
        snapshot, tools = rec.snapshot()
        assert tools == main_tools and snapshot[-1]["content"] == "I will look at the repo."
        assert seg.input_ids == chat_format.render(snapshot, main_tools)
        assert [t.opening for t in rec.side_threads()] == ["quota", title[0]["content"][:200]]
        assert rec.summary_counters()["turns"] == 1 and rec.summary_counters()["side_calls"] == 2


def test_a_main_thread_declared_by_tool_names_ignores_threads_without_them(chat_format: Any) -> None:
    search = {"type": "function", "function": {"name": "Agent", "parameters": {"type": "object", "properties": {}}}}
    rec = SessionRecorder(chat_format, main_thread=MainThreadSpec(tool_names=frozenset({"Agent"})))
    sub = [{"role": "system", "content": "subagent"}, {"role": "user", "content": "look"}]
    for i in range(2):
        _, msg = _turn(rec, chat_format, sub, f"sub {i}<|im_end|>")
        sub += [msg, {"role": "user", "content": "more"}]
    assert rec.main_thread() is None and rec.segments() == [] and rec.snapshot() == ([], [])
    main = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    assert rec.is_main(rec.resolve_thread(main, [*TOOLS, search]), main, [*TOOLS, search])
    _turn(rec, chat_format, main, "on it<|im_end|>", tools=[*TOOLS, search])
    (seg,) = rec.segments()
    assert "on it" in chat_format.decode(seg.input_ids) and "sub 1" not in chat_format.decode(seg.input_ids)
    (side,) = rec.side_threads()
    assert side.opening == "subagent" and side.generations == 2 and side.has_tools


def test_an_empty_main_thread_declaration_is_refused() -> None:
    with pytest.raises(ValidationError, match="system_contains or tool_names"):
        MainThreadSpec()


@pytest.mark.parametrize("client_keeps_reasoning", [True, False])
def test_template_policy_on_a_prefix_stable_template(chat_format: Any, client_keeps_reasoning: bool) -> None:
    """lego's own template is prefix-stable: a client that sends every turn back as returned extends
    one segment in O(new messages); one that drops reasoning_content gets what the template makes
    of that, a new segment each time the history loses reasoning. Either way every engine prompt is
    the template's rendering of the client's messages."""
    assert chat_format.prefix_stable
    rec = SessionRecorder(chat_format, reasoning_history="template")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(4):
        text = f'<think>\nstep {i}\n</think>\n\n<tool_call>\n{{"name": "bash", "arguments": {{"cmd": "ls {i}"}}}}\n</tool_call><|im_end|>'
        call, msg = _turn(rec, chat_format, messages, text, salt=str(i))
        assert call.prompt_ids == chat_format.render(messages, TOOLS, add_generation_prompt=True)
        echoed = msg if client_keeps_reasoning else {k: v for k, v in msg.items() if k != "reasoning_content"}
        messages += [echoed, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": f"f{i}"}]
    counters = rec.summary_counters()
    if client_keeps_reasoning:
        assert counters["segments"] == 1 and counters["reasoning_seals"] == 0
    else:
        assert counters["segments"] == 4 and counters["reasoning_seals"] == 3 and counters["reprefill_tokens"] > 0
    assert counters["template_unstable"] == 0
