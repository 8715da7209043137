# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
# (the SDKs type requests as TypedDict unions and responses as wide unions; these tests check shapes at run time)
"""The official openai and anthropic SDKs against a real proxy serving the tiny model."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from lego.proxies.server import ProxyServer

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
}
CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>'


class Clients:
    """SDK clients of a proxy session through one face: ``control`` (the trainer's listener, the
    session created on first use) or ``model`` (what sandboxes reach: a TCP model-face listener,
    the session opened first and its token as the API key)."""

    def __init__(self, face: str) -> None:
        self.face = face
        self.roots: dict[int, str] = {}

    def root(self, srv: ProxyServer, session: str) -> tuple[str, str]:
        if self.face == "control":
            return f"{srv.root_url}/s/{session}", "k"
        if id(srv) not in self.roots:
            self.roots[id(srv)] = f"http://127.0.0.1:{srv.listen_tcp('127.0.0.1')}"
        token = srv.open_session(session)
        return f"{self.roots[id(srv)]}/s/{session}", token

    def openai(self, srv: ProxyServer, session: str = "t") -> openai.OpenAI:
        root, key = self.root(srv, session)
        return openai.OpenAI(base_url=f"{root}/v1", api_key=key, max_retries=0)

    def anthropic(self, srv: ProxyServer, session: str = "t") -> anthropic.Anthropic:
        root, key = self.root(srv, session)
        return anthropic.Anthropic(base_url=root, api_key=key, max_retries=0)


@pytest.fixture(params=["control", "model"])
def clients(request: pytest.FixtureRequest) -> Clients:
    return Clients(request.param)


def test_chat_non_stream_usage_matches_the_recorded_segment(server: ProxyServer, clients: Clients) -> None:
    r = clients.openai(server).chat.completions.create(
        model="claude-whatever", messages=[{"role": "user", "content": "hello"}], max_tokens=12, seed=3
    )
    assert r.object == "chat.completion" and r.model == "claude-whatever"
    assert r.choices[0].message.role == "assistant"
    (seg,) = server.trajectory("t").segments
    assert r.usage is not None
    assert r.usage.prompt_tokens == len(seg.prompt_ids)
    assert r.usage.completion_tokens == seg.num_sampled <= 12


def test_chat_stream_has_usage_chunk_and_same_text_as_recorded(
    server: ProxyServer, chat_format: Any, clients: Clients
) -> None:
    stream = clients.openai(server).chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish in (["stop"], ["length"])
    traj = server.trajectory("t")
    assert traj.messages[-1]["content"] == text
    assert chunks[-1].usage.completion_tokens == traj.segments[0].num_sampled


def test_chat_tools_round_trip_streamed_tool_call_deltas(scripted: Any, clients: Clients) -> None:
    srv, engine = scripted
    engine.push("let me look\n" + CALL, "done<|im_end|>")
    client = clients.openai(srv)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "list files"}]
    stream = client.chat.completions.create(model="m", messages=messages, tools=[BASH], stream=True)
    chunks = list(stream)
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "bash"
    args = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(args) == {"cmd": "ls"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    call_id = deltas[0].id
    messages += [
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "a.py b.py"},
    ]
    r = client.chat.completions.create(model="m", messages=messages, tools=[BASH])
    assert r.choices[0].message.content == "done" and r.choices[0].finish_reason == "stop"
    traj = srv.trajectory("t")
    assert len(traj.segments) == 1 and traj.counters["calls"] == 2


def test_responses_stream_with_a_function_call_then_its_output(scripted: Any, clients: Clients) -> None:
    srv, engine = scripted
    engine.push(CALL, "all good<|im_end|>")
    client = clients.openai(srv)
    tools = [
        {
            "type": "function",
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": BASH["function"]["parameters"],
        }
    ]
    events = list(
        client.responses.create(model="gpt-x", instructions="agent", input="list files", tools=tools, stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    (fc,) = [o for o in final.output if o.type == "function_call"]
    assert fc.name == "bash" and json.loads(fc.arguments) == {"cmd": "ls"}
    r = client.responses.create(
        model="gpt-x",
        instructions="agent",
        tools=tools,
        input=[
            {"role": "user", "content": "list files"},
            {"type": "function_call", "call_id": fc.call_id, "name": "bash", "arguments": fc.arguments},
            {"type": "function_call_output", "call_id": fc.call_id, "output": "a.py"},
        ],
    )
    assert r.output_text == "all good"
    traj = srv.trajectory("t")
    assert len(traj.segments) == 1 and traj.counters["calls"] == 2


def test_anthropic_messages_non_stream_and_stream(server: ProxyServer, clients: Clients) -> None:
    client = clients.anthropic(server)
    msg = client.messages.create(
        model="claude-test-model", max_tokens=10, system="be brief", messages=[{"role": "user", "content": "hi"}]
    )
    assert msg.type == "message" and msg.role == "assistant" and msg.stop_reason in ("end_turn", "max_tokens")
    (seg,) = server.trajectory("t").segments
    assert msg.usage.input_tokens == len(seg.prompt_ids) and msg.usage.output_tokens == seg.num_sampled
    with client.messages.stream(
        model="claude-test-model", max_tokens=10, system="be brief", messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert final.usage.output_tokens >= 1
    count = client.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hi"}])
    assert count.input_tokens > 0


def test_anthropic_tool_use_then_tool_result(scripted: Any, clients: Clients) -> None:
    srv, engine = scripted
    engine.push("<think>\nneed ls\n</think>\n\n" + CALL, "two files<|im_end|>")
    client = clients.anthropic(srv)
    tools = [{"name": "bash", "description": "Run a shell command.", "input_schema": BASH["function"]["parameters"]}]
    history: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    with client.messages.stream(
        model="claude-x", max_tokens=200, system="agent", tools=tools, messages=history
    ) as stream:
        kinds = [e.type for e in stream]
        first = stream.get_final_message()
    assert "content_block_start" in kinds and first.stop_reason == "tool_use"
    blocks = {b.type: b for b in first.content}
    assert blocks["thinking"].thinking == "need ls"
    tool_use = blocks["tool_use"]
    assert tool_use.name == "bash" and tool_use.input == {"cmd": "ls"}
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "a.py b.py"}]},
    ]
    second = client.messages.create(model="claude-x", max_tokens=200, system="agent", tools=tools, messages=history)
    assert second.content[0].text == "two files" and second.stop_reason == "end_turn"
    traj = srv.trajectory("t")
    assert len(traj.segments) == 1 and traj.counters["calls"] == 2
    assert traj.messages[-2] == {"role": "tool", "tool_call_id": tool_use.id, "content": "a.py b.py"}


def test_unix_socket_serving_with_the_openai_sdk(tiny_engine: Any, chat_format: Any, tmp_path: Any) -> None:
    from lego.config import ProxyConfig

    sock = str(tmp_path / "proxy.sock")
    with ProxyServer(tiny_engine, chat_format, ProxyConfig(uds=sock, default_max_tokens=4)) as srv:
        http = httpx.Client(transport=httpx.HTTPTransport(uds=sock))
        client = openai.OpenAI(base_url=srv.session_base_url("u"), api_key="k", http_client=http, max_retries=0)
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert srv.uds == sock and r.usage is not None and r.usage.completion_tokens >= 1
        assert len(srv.trajectory("u").segments) == 1


def test_model_face_unix_socket_with_the_openai_sdk(tiny_engine: Any, chat_format: Any, tmp_path: Any) -> None:
    """What a local sandbox binds: the model face's socket, the session's token as the API key."""
    from lego.config import ProxyConfig

    with ProxyServer(tiny_engine, chat_format, ProxyConfig(uds=str(tmp_path / "c.sock"), default_max_tokens=4)) as srv:
        token = srv.open_session("u")
        endpoint = srv.endpoint("u")
        http = httpx.Client(transport=httpx.HTTPTransport(uds=srv.model_uds))
        client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, http_client=http, max_retries=0)
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert endpoint.api_key == token and r.usage is not None and r.usage.completion_tokens >= 1
        assert len(srv.trajectory("u").segments) == 1
