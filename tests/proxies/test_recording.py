# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
# (the SDKs type requests as TypedDict unions and responses as wide unions; these tests check shapes at run time)
"""Token-exact recording through the real proxy: one segment per unbroken conversation, the mask on
exactly the sampled tokens, logprobs equal to a teacher-forced forward, new segments on rewrites,
exact-retry rollback, subagent isolation, overflow and training-mode sampling."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer
from lego.types import SamplingOverride, Segment, SessionSpec

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    },
}


def _client(srv: ProxyServer, session: str = "r") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.session_base_url(session), api_key="k", max_retries=0)


def _tool_turn(i: int) -> str:
    return f'<think>\nstep {i}\n</think>\n\nchecking {i}\n<tool_call>\n{{"name": "bash", "arguments": {{"cmd": "cat f{i}.py"}}}}\n</tool_call><|im_end|>'


def _echo(msg: Any) -> dict[str, Any]:
    """The assistant message as a harness sends it back (re-serialized, reasoning dropped)."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.function.name,
                    "arguments": json.dumps(json.loads(c.function.arguments), indent=1),
                },
            }
            for c in msg.tool_calls
        ]
    return out


def _assert_teacher_forced(seg: Segment, engine: Any) -> None:
    (forward,) = engine.score_sync([seg.input_ids], [len(seg.prompt_ids)], 1.0)
    sampled = [(lp, f) for lp, f, m in zip(seg.response_logprobs, forward, seg.response_mask, strict=True) if m]
    assert sampled and max(abs(lp - f) for lp, f in sampled) <= 1e-4


def _run_tool_conversation(srv: ProxyServer, engine: Any, turns: int, session: str = "r") -> list[dict[str, Any]]:
    client = _client(srv, session)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "tests fail in f.py"},
    ]
    for i in range(turns):
        engine.push(_tool_turn(i))
        r = client.chat.completions.create(model="m", messages=messages, tools=[BASH])
        msg = r.choices[0].message
        assert msg.tool_calls
        messages += [
            _echo(msg),
            {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": f"contents of f{i}.py\n" * 3},
        ]
    return messages


def test_twenty_turn_tool_conversation_is_one_exact_segment(scripted: Any, tiny_engine: Any, chat_format: Any) -> None:
    srv, engine = scripted
    _run_tool_conversation(srv, engine, 20)
    traj = srv.trajectory("r")
    (seg,) = traj.segments
    full = seg.input_ids
    # Every engine prompt is a prefix of the segment, and the sampled ids follow it with mask 1.
    expected_mask = [0] * len(full)
    for i, prompt in enumerate(engine.prompts):
        assert full[: len(prompt)] == prompt
        n = len(chat_format.encode(_tool_turn(i)))
        expected_mask[len(prompt) : len(prompt) + n] = [1] * n
        assert chat_format.decode(full[len(prompt) : len(prompt) + n]) == _tool_turn(i)
    assert seg.response_mask == expected_mask[len(seg.prompt_ids) :]
    assert traj.counters["calls"] == 20 and traj.counters["rewrites"] == 0
    _assert_teacher_forced(seg, tiny_engine)


def test_sampled_conversation_logprobs_match_teacher_forcing(server: ProxyServer, tiny_engine: Any) -> None:
    client = _client(server)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "chat"}, {"role": "user", "content": "hello"}]
    for i in range(6):
        r = client.chat.completions.create(model="m", messages=messages, max_tokens=12, temperature=1.0)
        messages += [
            {"role": "assistant", "content": r.choices[0].message.content},
            {"role": "user", "content": f"more {i}"},
        ]
    (seg,) = server.trajectory("r").segments
    assert seg.num_sampled == sum(1 for m in seg.response_mask if m) > 0
    _assert_teacher_forced(seg, tiny_engine)


def test_compaction_starts_a_second_segment_and_keeps_the_first(scripted: Any, tiny_engine: Any) -> None:
    srv, engine = scripted
    messages = _run_tool_conversation(srv, engine, 4)
    before = srv.trajectory("r").segments[0]
    compacted = [messages[0], {"role": "user", "content": "Summary: looked at f0..f3. Continue."}]
    engine.push("done<|im_end|>")
    _client(srv).chat.completions.create(model="m", messages=compacted, tools=[BASH])
    traj = srv.trajectory("r")
    assert len(traj.segments) == 2 and traj.counters["rewrites"] == 1
    assert traj.segments[0] == before
    assert traj.segments[1].num_sampled == len(engine.chat.encode("done<|im_end|>"))
    for seg in traj.segments:
        _assert_teacher_forced(seg, tiny_engine)


def test_exact_retry_rolls_back_only_the_last_generation(scripted: Any) -> None:
    srv, engine = scripted
    messages = _run_tool_conversation(srv, engine, 3)
    client = _client(srv)
    engine.push("first try<|im_end|>", "second try<|im_end|>")
    client.chat.completions.create(model="m", messages=messages, tools=[BASH])
    kept_before = srv.trajectory("r").segments[0].num_sampled
    r = client.chat.completions.create(model="m", messages=messages, tools=[BASH])
    assert r.choices[0].message.content == "second try"
    traj = srv.trajectory("r")
    (seg,) = traj.segments
    n_first = len(engine.chat.encode("first try<|im_end|>"))
    n_second = len(engine.chat.encode("second try<|im_end|>"))
    assert seg.num_sampled == kept_before - n_first + n_second
    assert traj.counters["retries"] == 1 and len(traj.discarded) == 1
    assert engine.chat.decode(traj.discarded[0].token_ids) == "first try<|im_end|>"
    assert traj.messages[-1]["content"] == "second try"


def test_replacing_the_last_assistant_turn_is_a_retry(scripted: Any) -> None:
    srv, engine = scripted
    messages = _run_tool_conversation(srv, engine, 2)
    engine.push("draft<|im_end|>", "final<|im_end|>")
    client = _client(srv)
    client.chat.completions.create(model="m", messages=messages, tools=[BASH])
    edited = [*messages, {"role": "assistant", "content": "an edited answer"}, {"role": "user", "content": "go on"}]
    client.chat.completions.create(model="m", messages=edited, tools=[BASH])
    traj = srv.trajectory("r")
    assert len(traj.segments) == 1 and traj.counters["retries"] == 1
    assert traj.discarded[0].reason == "last assistant replaced"


def test_subagent_is_served_but_not_recorded_in_the_main_thread(scripted: Any) -> None:
    srv, engine = scripted
    messages = _run_tool_conversation(srv, engine, 3)
    main_before = srv.trajectory("r").segments
    engine.push("sub answer<|im_end|>")
    r = _client(srv).chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "You are a search subagent."}, {"role": "user", "content": "find x"}],
    )
    assert r.choices[0].message.content == "sub answer"
    engine.push(_tool_turn(3))
    _client(srv).chat.completions.create(model="m", messages=messages, tools=[BASH])
    traj = srv.trajectory("r")
    assert len(traj.segments) == 1 and traj.counters["side_calls"] == 1 and traj.counters["rewrites"] == 0
    assert traj.segments[0].input_ids[: len(main_before[0].input_ids)] == main_before[0].input_ids
    assert all(m.get("content") != "sub answer" for m in traj.messages)


def test_context_overflow_is_a_non_retryable_400_and_labels_overlong(scripted: Any) -> None:
    srv, engine = scripted
    engine.max_model_len = 64
    with pytest.raises(openai.BadRequestError) as err:
        _client(srv).chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 200}])
    assert err.value.response.headers["x-should-retry"] == "false"
    assert "context window" in err.value.message
    assert srv.trajectory("r").termination == "overlong"


def test_training_mode_overrides_sampling_and_says_so(tiny_engine: Any, chat_format: Any) -> None:
    with ProxyServer(tiny_engine, chat_format, ProxyConfig(port=0, default_max_tokens=4, strict_sessions=True)) as srv:
        srv.open_session(
            "train-1",
            SessionSpec(sampling_override=SamplingOverride(temperature=0.7), max_turns=2, metadata={"task_id": "t1"}),
        )
        url = srv.session_base_url("train-1") + "/chat/completions"
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.1, "top_p": 0.5}
        r = httpx.post(url, json=body)
        assert r.status_code == 200
        assert r.headers["x-lego-sampling-override"] == "temperature=0.7;top_p=1.0;top_k=0"
        body["messages"] = [*body["messages"], r.json()["choices"][0]["message"], {"role": "user", "content": "again"}]
        assert httpx.post(url, json=body).status_code == 200
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "3rd"},
        ]
        over = httpx.post(url, json=body)
        assert over.status_code == 400 and over.json()["error"]["code"] == "max_turns"
        traj = srv.trajectory("train-1")
        assert traj.termination == "max_turns" and traj.task_id == "t1" and len(traj.segments) == 1
        unknown = httpx.post(srv.session_base_url("nope") + "/chat/completions", json=body)
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
