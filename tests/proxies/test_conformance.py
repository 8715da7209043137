# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
# (the SDKs type requests as TypedDict unions and responses as wide unions; these tests check shapes at run time)
"""API conformance through the official SDKs: tool_choice is enforced, every request option is
honoured or refused with a 400 naming it, errors keep the API's shape on every route and method.

Tool-choice tests use the scripted engine (a random tiny model never writes a valid call) and
check the recorded tokens: the forced tool-call prefix is prompt (mask 0), what follows it is
sampled (mask 1). The real tiny model shows the other side: under a forcing tool_choice it gets
an error, never a 200 with plain text.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer
from lego.types import SamplingOverride, SessionSpec

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
ANTHROPIC_BASH = {"name": "bash", "description": "Run a shell command.", "input_schema": BASH["function"]["parameters"]}
ANTHROPIC_READ = {"name": "read", "input_schema": READ["function"]["parameters"]}
USER = [{"role": "user", "content": "list the files"}]


def oai(srv: ProxyServer, session: str = "c") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.root_url}/s/{session}/v1", api_key="k", max_retries=0)


def claude(srv: ProxyServer, session: str = "c") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{srv.root_url}/s/{session}", api_key="k", max_retries=0)


def response_masks(srv: ProxyServer, session: str) -> tuple[list[int], list[int], list[int]]:
    (seg,) = srv.trajectory(session).segments
    return seg.prompt_ids, seg.response_ids, seg.response_mask


# ---------------------------------------------------------------- tool_choice


def test_named_function_forces_its_call_and_records_the_forced_prefix_as_prompt(scripted: Any) -> None:
    srv, engine = scripted
    client = oai(srv)
    engine.push("hello<|im_end|>", '{"cmd": "ls"}}\n</tool_call><|im_end|>')
    first = client.chat.completions.create(model="m", messages=USER, tools=[BASH, READ])
    history = [*USER, {"role": "assistant", "content": first.choices[0].message.content}, *USER]
    r = client.chat.completions.create(
        model="m", messages=history, tools=[BASH, READ], tool_choice={"type": "function", "function": {"name": "bash"}}
    )
    (call,) = r.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("bash", {"cmd": "ls"})
    assert r.choices[0].finish_reason == "tool_calls"
    forced = srv.service.chat.encode('<tool_call>\n{"name": "bash", "arguments": ')
    assert engine.prompts[-1][-len(forced) :] == forced  # the engine continued the forced opening
    sampled = srv.service.chat.encode('{"cmd": "ls"}}\n</tool_call>')
    _, ids, mask = response_masks(srv, "c")
    at = max(
        i for i in range(1, len(mask)) if mask[i] == 1 and mask[i - 1] == 0
    )  # where the last turn's sampling began
    assert ids[at - len(forced) : at] == forced and set(mask[at - len(forced) : at]) == {0}
    assert ids[at : at + len(sampled)] == sampled and set(mask[at : at + len(sampled)]) == {1}


def test_required_forces_a_call_opener_and_the_policy_picks_the_tool(scripted: Any) -> None:
    srv, engine = scripted
    engine.push('read", "arguments": {"path": "a.py"}}\n</tool_call><|im_end|>')
    r = oai(srv).chat.completions.create(model="m", messages=USER, tools=[BASH, READ], tool_choice="required")
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "read"
    opener = srv.service.chat.encode('<tool_call>\n{"name": "')
    prompt, _, mask = response_masks(srv, "c")
    assert prompt[-len(opener) :] == opener and mask[0] == 1


def test_required_refuses_a_reply_without_a_declared_tool(scripted: Any) -> None:
    srv, engine = scripted
    engine.push('nope", "arguments": {}}\n</tool_call><|im_end|>')
    with pytest.raises(openai.APIStatusError) as err:
        oai(srv).chat.completions.create(model="m", messages=USER, tools=[BASH, READ], tool_choice="required")
    assert err.value.status_code == 502 and "tool_choice" in err.value.message
    assert srv.trajectory("c").segments == []  # nothing recorded
    assert srv.trajectory("c").counters["tool_choice_failures"] == 1


def test_forced_tool_choice_on_the_real_model_never_answers_plain_text(server: ProxyServer) -> None:
    client = openai.OpenAI(base_url=f"{server.root_url}/s/real/v1", api_key="k", max_retries=0)
    for choice in ("required", {"type": "function", "function": {"name": "bash"}}):
        try:
            r = client.chat.completions.create(model="m", messages=USER, tools=[BASH], tool_choice=choice, max_tokens=8)
        except openai.APIStatusError as exc:
            assert exc.status_code in (400, 502) and exc.body["param"] in ("max_tokens", None)
        else:
            assert [c.function.name for c in r.choices[0].message.tool_calls] == ["bash"]


def test_anthropic_tool_and_any_choices_are_enforced(scripted: Any) -> None:
    srv, engine = scripted
    engine.push('{"cmd": "pwd"}}\n</tool_call><|im_end|>', 'bash", "arguments": {"cmd": "id"}}\n</tool_call><|im_end|>')
    c = claude(srv, "a")
    msgs = [{"role": "user", "content": "where am I"}]
    r = c.messages.create(
        model="m", max_tokens=64, messages=msgs, tools=[ANTHROPIC_BASH], tool_choice={"type": "tool", "name": "bash"}
    )
    assert [(b.type, b.name, b.input) for b in r.content] == [("tool_use", "bash", {"cmd": "pwd"})]
    assert r.stop_reason == "tool_use"
    r = claude(srv, "a2").messages.create(
        model="m", max_tokens=64, messages=msgs, tools=[ANTHROPIC_READ, ANTHROPIC_BASH], tool_choice={"type": "any"}
    )
    assert [(b.type, b.input) for b in r.content] == [("tool_use", {"cmd": "id"})]


def test_tool_choice_naming_an_undeclared_tool_is_a_400(scripted: Any) -> None:
    srv, _ = scripted
    with pytest.raises(openai.BadRequestError) as err:
        oai(srv).chat.completions.create(
            model="m", messages=USER, tools=[BASH], tool_choice={"type": "function", "function": {"name": "rm"}}
        )
    assert err.value.body["param"] == "tool_choice"
    with pytest.raises(anthropic.BadRequestError) as aerr:
        claude(srv).messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}], tool_choice={"type": "any"}
        )
    assert "tool_choice" in aerr.value.message


def test_parallel_tool_calls_false_ends_the_turn_after_the_first_call(scripted: Any) -> None:
    srv, engine = scripted
    two = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "a"}}\n</tool_call>\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "b"}}\n</tool_call><|im_end|>'
    engine.push(two)
    r = oai(srv).chat.completions.create(model="m", messages=USER, tools=[BASH], parallel_tool_calls=False)
    assert [json.loads(c.function.arguments)["cmd"] for c in r.choices[0].message.tool_calls] == ["a"]


# ---------------------------------------------------------------- options honoured or refused


def test_logprobs_are_the_recorded_sampled_logprobs(server: ProxyServer) -> None:
    r = oai(server, "lp").chat.completions.create(model="m", messages=USER, logprobs=True, max_tokens=6)
    content = r.choices[0].logprobs.content
    (seg,) = server.trajectory("lp").segments
    sampled = [lp for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if m == 1]
    assert [t.logprob for t in content] == pytest.approx(sampled[: len(content)])
    assert len(content) >= len(sampled) - 1  # a final end-of-turn token is not shown
    stream = oai(server, "lp2").chat.completions.create(
        model="m", messages=USER, logprobs=True, max_tokens=6, stream=True
    )
    streamed = [t.logprob for ch in stream for c in ch.choices if c.logprobs for t in c.logprobs.content]
    (seg2,) = server.trajectory("lp2").segments
    assert streamed == pytest.approx(
        [lp for lp, m in zip(seg2.response_logprobs, seg2.response_mask, strict=True) if m][: len(streamed)]
    )


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"logprobs": True, "top_logprobs": 2}, "top_logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, "response_format"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"5": 10}}, "logit_bias"),
        ({"extra_body": {"min_p": 0.1}}, "min_p"),
        ({"reasoning_effort": "very"}, "reasoning_effort"),
        ({"n": 2}, "n"),
    ],
)
def test_chat_options_that_cannot_be_honoured_are_a_400_naming_them(
    server: ProxyServer, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai(server).chat.completions.create(model="m", messages=USER, max_tokens=4, **extra)
    assert err.value.body["param"] == param and param in err.value.message


def test_advisory_chat_fields_are_accepted(server: ProxyServer) -> None:
    r = oai(server).chat.completions.create(
        model="m", messages=USER, max_tokens=4, user="u", store=False, response_format={"type": "text"}, seed=1
    )
    assert r.choices[0].finish_reason in ("stop", "length")


def test_anthropic_top_k_is_honoured_and_overridden_in_training(tiny_engine: Any, chat_format: Any) -> None:
    # top_k=1 is greedy: two samples at temperature 1 agree with each other and with temperature 0.
    with ProxyServer(tiny_engine, chat_format, ProxyConfig(port=0)) as srv:
        c = claude(srv, "k")
        msgs = [{"role": "user", "content": "count"}]
        texts = {
            c.messages.create(model="m", max_tokens=8, messages=msgs, extra_body={"top_k": 1, "temperature": 1.0})
            .content[0]
            .text
            for _ in range(2)
        }
        greedy = claude(srv, "g").messages.create(
            model="m", max_tokens=8, messages=msgs, extra_body={"temperature": 0.0}
        )
        assert texts == {greedy.content[0].text}
        srv.open_session("train", SessionSpec(sampling_override=SamplingOverride(temperature=1.0)))
        raw = httpx.post(
            f"{srv.root_url}/s/train/v1/messages",
            json={"model": "m", "max_tokens": 4, "messages": msgs, "top_k": 1},
        )
        assert raw.status_code == 200 and "top_k=0" in raw.headers["x-lego-sampling-override"]


def test_anthropic_requires_max_tokens(server: ProxyServer) -> None:
    r = httpx.post(f"{server.root_url}/v1/messages", json={"model": "m", "messages": USER})
    assert r.status_code == 400 and r.json()["type"] == "error" and "max_tokens" in r.json()["error"]["message"]


def test_anthropic_prefill_is_continued_not_closed(scripted: Any) -> None:
    srv, engine = scripted
    engine.push(' "b": 2}<|im_end|>')
    msgs = [{"role": "user", "content": "json please"}, {"role": "assistant", "content": '{"a": 1,'}]
    r = claude(srv, "p").messages.create(model="m", max_tokens=32, messages=msgs)
    assert r.content[0].text == ' "b": 2}'  # only the continuation, as the Messages API returns it
    prefill = srv.service.chat.encode('{"a": 1,')
    assert engine.prompts[-1][-len(prefill) :] == prefill
    chat = srv.service.chat
    open_turn = chat.render(msgs[:1], add_generation_prompt=True)
    assert engine.prompts[-1] == open_turn + prefill  # the prefill continues the open turn
    traj = srv.trajectory("p")
    assert traj.messages[-1]["content"] == '{"a": 1, "b": 2}'


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"thinking": {"type": "sometimes"}}, "thinking.type"),
        ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"container": "c"}, "container"),
        ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "output_config.format"),
        ({"output_config": {"effort": "enormous"}}, "output_config.effort"),
    ],
)
def test_anthropic_options_that_cannot_be_honoured_are_a_400(
    server: ProxyServer, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        claude(server).messages.create(model="m", max_tokens=4, messages=USER, **extra)
    assert param in err.value.message


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"tools": [{"type": "local_shell"}]}, "tools[0].type"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ],
)
def test_responses_options_that_cannot_be_honoured_are_a_400(
    server: ProxyServer, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai(server).responses.create(model="m", input="hi", max_output_tokens=4, **extra)
    assert err.value.body["param"] == param


def test_responses_logprobs_on_request(server: ProxyServer) -> None:
    r = oai(server, "rl").responses.create(
        model="m", input="hi", max_output_tokens=4, include=["message.output_text.logprobs"], store=False
    )
    part = r.output[-1].content[0]
    assert part.logprobs and all(lp.logprob <= 0 for lp in part.logprobs)


# ---------------------------------------------------------------- error shapes


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v2/nothing", 404),
        ("POST", "/v1/completions", 404),
        ("GET", "/v1/chat/completions", 405),
        ("PUT", "/s/x/v1/messages", 405),
    ],
)
def test_unknown_routes_and_wrong_methods_answer_json_errors(
    server: ProxyServer, method: str, path: str, status: int
) -> None:
    r = httpx.request(method, server.root_url + path)
    assert r.status_code == status and r.headers["content-type"].startswith("application/json")
    body = r.json()
    if "/v1/messages" in path:
        assert body["type"] == "error" and body["error"]["message"]
    else:
        assert body["error"]["message"] and body["error"]["type"]
    if status == 405:
        assert "POST" in r.headers["allow"]


def test_openai_sdk_sees_a_typed_not_found(server: ProxyServer) -> None:
    with pytest.raises(openai.NotFoundError):
        oai(server).completions.create(model="m", prompt="x")


def test_unknown_session_404_says_strict_only_when_strict(tiny_engine: Any, chat_format: Any) -> None:
    for strict in (False, True):
        with ProxyServer(tiny_engine, chat_format, ProxyConfig(port=0, strict_sessions=strict)) as srv:
            r = httpx.get(f"{srv.root_url}/s/ghost/trajectory")
            assert r.status_code == 404
            assert ("strict mode" in r.json()["error"]["message"]) is strict


def test_tool_choice_is_refused_where_the_tool_call_format_cannot_be_forced(tiny_engine: Any, chat_format: Any) -> None:
    from lego.models.chat import ChatFormat

    llama = ChatFormat(chat_format.tokenizer, tool_parser="llama3_json")
    with ProxyServer(tiny_engine, llama, ProxyConfig(port=0)) as srv:
        for extra in ({"tool_choice": "required"}, {"parallel_tool_calls": False}):
            with pytest.raises(openai.BadRequestError) as err:
                oai(srv).chat.completions.create(model="m", messages=USER, tools=[BASH], max_tokens=4, **extra)
            assert err.value.body["param"] == next(iter(extra))


@pytest.mark.parametrize(
    ("api", "extra", "enabled"),
    [
        ("chat", {"reasoning_effort": "high"}, True),
        ("chat", {"reasoning_effort": "none"}, False),
        ("messages", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, True),
        ("messages", {"thinking": {"type": "disabled"}}, False),
        ("messages", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}, True),  # Claude Code 2.1
        ("responses", {"reasoning": {"effort": "minimal", "summary": "auto"}}, False),
        ("responses", {"reasoning": {"effort": "medium"}}, True),
    ],
)
def test_thinking_switches_reach_the_template(api: str, extra: dict[str, Any], enabled: bool) -> None:
    """What harnesses send about reasoning (Claude Code's ``thinking``, Codex's ``reasoning``) is honoured as
    the template's ``enable_thinking`` switch, not refused and not dropped."""
    from lego.proxies import anthropic_messages, openai_chat, openai_responses

    if api == "chat":
        body: dict[str, Any] = {"model": "m", "messages": USER, **extra}
        creq = openai_chat.to_chat_request(openai_chat.ChatCompletionRequest.model_validate(body))
    elif api == "messages":
        body = {"model": "m", "max_tokens": 2048, "messages": USER, **extra}
        creq = anthropic_messages.to_chat_request(anthropic_messages.MessagesRequest.model_validate(body))
    else:
        body = {"model": "m", "input": "hi", **extra}
        creq = openai_responses.to_chat_request(openai_responses.ResponsesRequest.model_validate(body))
    assert creq.chat_template_kwargs == {"enable_thinking": enabled}


def test_namespace_tools_are_offered_as_their_functions_and_answered_with_their_namespace() -> None:
    """Codex declares its sub-agent tools inside a ``namespace`` tool: the model sees each function, and a
    call to one comes back carrying the namespace it was declared in."""
    from lego.proxies import openai_responses
    from lego.proxies.service import ChatResult

    fn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}
    body = {"model": "m", "input": "hi", "tools": [{"type": "namespace", "name": "multi_agent_v1", "tools": [fn]}]}
    req = openai_responses.ResponsesRequest.model_validate(body)
    creq = openai_responses.to_chat_request(req)
    assert [t["function"]["name"] for t in creq.tools] == ["spawn_agent"]
    call = {"id": "c1", "type": "function", "function": {"name": "spawn_agent", "arguments": "{}"}}
    res = ChatResult(
        message={"role": "assistant", "content": "", "tool_calls": [call]},
        reasoning="",
        finish_reason="tool_calls",
        prompt_tokens=1,
        completion_tokens=1,
        headers={},
    )
    (item,) = [o for o in openai_responses.responses_response(res, req, "m")["output"] if o["type"] == "function_call"]
    assert item["name"] == "spawn_agent" and item["namespace"] == "multi_agent_v1"
