# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
# (the SDKs type requests as TypedDict unions and responses as wide unions; these tests check shapes at run time)
"""Message-level fields on every face: converted, accepted as an echo or hint that changes nothing the
policy samples, accepted when null or empty, or refused with a 400 naming the exact path.

The accepted shapes are what the official SDKs send back from a reply and what the installed
harnesses were seen to send (their request bodies logged while their e2e tests ran): Claude Code
(``cache_control``, ``is_error``), Codex (item ``id``/``status``, ``annotations``/``logprobs``),
Gemini CLI (``thoughtSignature``), Qwen Code (``reasoning`` mirrored from ``reasoning_content``),
OpenCode (``cache_control``, ``extra_content`` for Claude- and Gemini-named models).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from lego.config import ProxyConfig
from lego.engines.scripted import ScriptedEngine
from lego.models.chat import ChatFormat
from lego.proxies.openai_chat import template_renders_name
from lego.proxies.server import ProxyServer

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
}
THINK_CALL = '<think>\nneed ls\n</think>\n\nlooking<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>'
USER = {"role": "user", "content": "list files"}


def oai(srv: ProxyServer, session: str = "t") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.root_url}/s/{session}/v1", api_key="k", max_retries=0)


def one_segment(srv: ProxyServer, session: str, calls: int) -> None:
    """Both calls landed in one segment: the second request's history matched the first's exactly."""
    traj = srv.trajectory(session)
    assert len(traj.segments) == 1 and traj.counters["calls"] == calls


# ---------------------------------------------------------------- OpenAI chat


@pytest.mark.parametrize("echo", ["sdk_object", "model_dump"])
def test_the_openai_sdk_echo_of_its_reply_is_accepted_and_extends_the_segment(scripted: Any, echo: str) -> None:
    """``messages.append(reply.message)`` (the SDK serialises what it parsed) and ``.model_dump()``
    (which adds ``refusal``/``annotations``/``audio``/``function_call`` as null) both extend the thread."""
    srv, engine = scripted
    engine.push(THINK_CALL, "two files<|im_end|>")
    client = oai(srv)
    messages: list[Any] = [{"role": "system", "content": "agent"}, USER]
    first = client.chat.completions.create(model="m", messages=messages, tools=[BASH]).choices[0].message
    dumped = first.model_dump()
    assert {"refusal", "annotations", "audio", "function_call"} <= dumped.keys()
    messages += [first if echo == "sdk_object" else dumped]
    messages += [{"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "a.py b.py"}]
    second = client.chat.completions.create(model="m", messages=messages, tools=[BASH])
    assert second.choices[0].message.content == "two files"
    one_segment(srv, "t", 2)


def test_what_harnesses_put_on_chat_messages_is_honoured_or_inert(scripted: Any) -> None:
    """Qwen Code's text-part lists and ``reasoning`` mirrored from ``reasoning_content``, OpenCode's
    ``cache_control`` and ``extra_content``, a streamed call's ``index``: the canonical history is the
    plain one, so the thread still extends."""
    srv, engine = scripted
    engine.push(THINK_CALL, "two files<|im_end|>")
    client = oai(srv)
    first = client.chat.completions.create(model="m", messages=[USER], tools=[BASH]).choices[0].message
    call = first.tool_calls[0]
    hint = {"type": "ephemeral"}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "list files", "cache_control": hint}]},
        {
            "role": "assistant",
            "content": "looking",
            "reasoning_content": "need ls",
            "reasoning": "need ls",
            "cache_control": hint,
            "tool_calls": [
                {
                    "index": 0,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": call.function.arguments},
                    "extra_content": {"google": {"thought_signature": "sig"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": [{"type": "text", "text": "a.py b.py"}]},
    ]
    client.chat.completions.create(model="m", messages=messages, tools=[BASH])
    one_segment(srv, "t", 2)
    assert srv.trajectory("t").messages[1]["reasoning_content"] == "need ls"


def test_null_and_empty_message_fields_say_nothing(server: ProxyServer) -> None:
    quiet = {"role": "user", "content": "hi", "foo": None, "bar": [], "baz": {}, "name": "", "refusal": None}
    oai(server).chat.completions.create(model="m", messages=[quiet], max_tokens=2)
    assert server.trajectory("t").messages[0] == {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"role": "user", "content": "hi", "name": "alice"}, "messages[0].name"),
        ({"role": "user", "content": "hi", "priority": 3}, "messages[0].priority"),
        ({"role": "user", "content": [{"type": "text", "text": "hi", "lang": "en"}]}, "messages[0].content[0].lang"),
        ({"role": "assistant", "content": None, "refusal": "I cannot"}, "messages[0].refusal"),
        ({"role": "assistant", "content": "", "audio": {"id": "audio_1"}}, "messages[0].audio"),
        (
            {"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}},
            "messages[0].function_call",
        ),
        ({"role": "assistant", "content": "", "prefix": True}, "messages[0].prefix"),
        ({"role": "assistant", "content": "", "reasoning_content": "a", "reasoning": "b"}, "messages[0].reasoning"),
        (
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}, "x": 1}],
            },
            "messages[0].tool_calls[0].x",
        ),
        ({"role": "tool", "tool_call_id": "c", "content": "x", "name": "bash"}, "messages[0].name"),
    ],
)
def test_unconverted_chat_message_fields_are_a_400_naming_their_path(
    server: ProxyServer, message: dict[str, Any], path: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai(server).chat.completions.create(model="m", messages=[message, {"role": "user", "content": "go"}])
    assert err.value.body["param"] == path and path in err.value.body["message"]


NAMED_TURN = "'<|im_start|>' + message.role + '\\n' + content"


@pytest.fixture()
def naming_template(tiny_model_dir: Path, tmp_path: Path) -> ChatFormat:
    """The tiny model's template, changed as a user would with ``--chat-template`` to write names."""
    template = ChatFormat.from_pretrained(tiny_model_dir).template
    assert NAMED_TURN in template
    named = "'<|im_start|>' + message.role + ((' name=' + message.name) if message.name else '') + '\\n' + content"
    path = tmp_path / "named.jinja"
    path.write_text(template.replace(NAMED_TURN, named), encoding="utf-8")
    return ChatFormat.from_pretrained(tiny_model_dir, chat_template=path)


def test_a_name_is_honoured_where_the_template_renders_it(tiny_engine: Any, naming_template: ChatFormat) -> None:
    engine = ScriptedEngine(tiny_engine, naming_template)
    engine.push("hello<|im_end|>", "again<|im_end|>")
    with ProxyServer(engine, naming_template, ProxyConfig(port=0)) as srv:  # type: ignore[arg-type]
        client = oai(srv)
        history: list[Any] = [{"role": "user", "content": "hi", "name": "alice"}]
        reply = client.chat.completions.create(model="m", messages=history).choices[0].message
        history += [reply, {"role": "user", "content": "again", "name": "bob"}]
        client.chat.completions.create(model="m", messages=history)
        traj = srv.trajectory("t")
    assert traj.messages[0] == {"role": "user", "content": "hi", "name": "alice"}
    (seg,) = traj.segments  # the same named history, sent again, matched: one segment
    prompt = naming_template.decode(seg.prompt_ids + seg.response_ids)
    assert "<|im_start|>user name=alice\nhi" in prompt and "<|im_start|>user name=bob\nagain" in prompt


class CountingTemplate:
    """A chat template that counts its renders (to see the name probe run once per role)."""

    def __init__(self, chat: ChatFormat) -> None:
        self.chat = chat
        self.renders = 0

    def render_text(self, messages: Any, tools: Any = None, add_generation_prompt: bool = False) -> str:
        self.renders += 1
        return self.chat.render_text(messages, tools, add_generation_prompt)


def test_the_name_probe_runs_once_per_template_and_role(chat_format: ChatFormat, naming_template: ChatFormat) -> None:
    plain, named = CountingTemplate(chat_format), CountingTemplate(naming_template)
    assert [template_renders_name(plain, r) for r in ("user", "user", "assistant", "tool")] == [False] * 4
    # this template names user turns only (its leading system message and assistant turns are written apart)
    assert [template_renders_name(named, r) for r in ("user", "user", "system", "assistant")] == [
        True,
        True,
        False,
        False,
    ]
    assert (plain.renders, named.renders) == (3, 3)


# ---------------------------------------------------------------- Anthropic messages


def test_claude_code_blocks_and_the_sdk_echo_are_accepted_and_extend_the_segment(scripted: Any) -> None:
    """The SDK's parsed blocks echoed back (and dumped: ``citations`` null), Claude Code's
    ``cache_control`` on system, text and tool_result blocks, its ``is_error`` flag."""
    srv, engine = scripted
    engine.push(THINK_CALL, "two files<|im_end|>", "done<|im_end|>")
    client = anthropic.Anthropic(base_url=f"{srv.root_url}/s/t", api_key="k", max_retries=0)
    hint = {"type": "ephemeral"}
    tools = [{"name": "bash", "input_schema": BASH["function"]["parameters"], "cache_control": hint}]
    system = [{"type": "text", "text": "agent", "cache_control": hint}]
    history: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "list files", "cache_control": hint}]}]
    first = client.messages.create(model="c", max_tokens=200, system=system, tools=tools, messages=history)
    tool_use = next(b for b in first.content if b.type == "tool_use")
    history += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_use.id,
                    "content": "a.py",
                    "is_error": False,
                    "cache_control": hint,
                }
            ],
        },
    ]
    second = client.messages.create(model="c", max_tokens=200, system=system, tools=tools, messages=history)
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in second.content]},
        {"role": "user", "content": [{"type": "text", "text": "thanks", "citations": None}]},
    ]
    assert "citations" in history[-2]["content"][0]
    client.messages.create(model="c", max_tokens=200, system=system, tools=tools, messages=history)
    one_segment(srv, "t", 3)


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"role": "user", "content": "hi", "name": "alice"}, "messages[0].name"),
        ({"role": "user", "content": [{"type": "text", "text": "hi", "lang": "en"}]}, "messages[0].content[0].lang"),
        (
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "x", "lang": "en"}],
                    }
                ],
            },
            "messages[0].content[0].content[0].lang",
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t",
                        "name": "bash",
                        "input": {},
                        "caller": {"type": "code_execution_20250825"},
                    }
                ],
            },
            "messages[0].content[0].caller",
        ),
    ],
)
def test_unconverted_anthropic_fields_are_a_400_naming_their_path(
    server: ProxyServer, message: dict[str, Any], path: str
) -> None:
    client = anthropic.Anthropic(base_url=f"{server.root_url}/s/t", api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="c", max_tokens=4, messages=[message, {"role": "user", "content": "go"}])
    assert err.value.status_code == 400 and path in err.value.body["error"]["message"]


# ---------------------------------------------------------------- OpenAI Responses


def test_codex_items_are_accepted_and_extend_the_segment(scripted: Any) -> None:
    """Codex sends every item back with ``id`` and ``status``, output_text parts with ``annotations``
    and ``logprobs``, reasoning items with an empty ``summary`` and a null ``encrypted_content``."""
    srv, engine = scripted
    engine.push(THINK_CALL, "two files<|im_end|>")
    client = oai(srv)
    tools = [{"type": "function", "name": "bash", "parameters": BASH["function"]["parameters"]}]
    user = {
        "type": "message",
        "id": "msg_u1",
        "role": "user",
        "content": [{"type": "input_text", "text": "list files"}],
    }
    first = client.responses.create(model="m", instructions="agent", input=[user], tools=tools)
    echoed = [item.model_dump() for item in first.output]
    for item in echoed:
        if item["type"] == "reasoning":
            item["encrypted_content"] = None
    call = next(item for item in echoed if item["type"] == "function_call")
    output = {"type": "function_call_output", "id": "fco_1", "call_id": call["call_id"], "output": "a.py"}
    client.responses.create(model="m", instructions="agent", input=[user, *echoed, output], tools=tools)
    one_segment(srv, "t", 2)


@pytest.mark.parametrize(
    ("item", "path"),
    [
        ({"role": "user", "content": "hi", "name": "alice"}, "input[0].name"),
        ({"role": "user", "content": [{"type": "input_text", "text": "hi", "lang": "en"}]}, "input[0].content[0].lang"),
        ({"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}, "input[0].encrypted_content"),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "x", "y": 1}]},
            "input[0].output[0].y",
        ),
    ],
)
def test_unconverted_responses_fields_are_a_400_naming_their_path(
    server: ProxyServer, item: dict[str, Any], path: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai(server).responses.create(model="m", input=[item, {"role": "user", "content": "go"}])
    assert err.value.body["param"] == path


# ---------------------------------------------------------------- Gemini


def gemini(srv: ProxyServer) -> genai.Client:
    options = genai_types.HttpOptions(
        base_url=f"{srv.root_url}/s/t", retry_options=genai_types.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key="k", http_options=options)


def test_gemini_cli_turns_are_accepted_and_extend_the_segment(scripted: Any) -> None:
    """Gemini CLI's shape: a ``systemInstruction`` with role user, a ``thoughtSignature`` on the
    turn's first functionCall, a functionResponse answering it by id."""
    srv, engine = scripted
    engine.push(THINK_CALL, "two files<|im_end|>")
    url = f"{srv.root_url}/s/t/v1beta/models/m:generateContent"
    decl = {"name": "bash", "parametersJsonSchema": BASH["function"]["parameters"]}
    body: dict[str, Any] = {
        "systemInstruction": {"role": "user", "parts": [{"text": "agent"}]},
        "contents": [{"role": "user", "parts": [{"text": "list files"}]}],
        "tools": [{"functionDeclarations": [decl]}],
    }
    first = httpx.post(url, json=body, timeout=60).json()
    parts = first["candidates"][0]["content"]["parts"]
    call = next(p["functionCall"] for p in parts if "functionCall" in p)
    answer = [
        p if "functionCall" not in p else {**p, "thoughtSignature": "skip_thought_signature_validator"} for p in parts
    ]
    body["contents"] += [
        {"role": "model", "parts": answer},
        {
            "role": "user",
            "parts": [{"functionResponse": {"id": call["id"], "name": "bash", "response": {"output": "a.py"}}}],
        },
    ]
    assert httpx.post(url, json=body, timeout=60).status_code == 200
    one_segment(srv, "t", 2)


@pytest.mark.parametrize(
    ("content", "path"),
    [
        ({"role": "user", "parts": [{"text": "hi"}], "author": "alice"}, "contents[0].author"),
        (
            {"role": "user", "parts": [{"text": "hi", "videoMetadata": {"fps": 1}}]},
            "contents[0].parts[0].videoMetadata",
        ),
        (
            {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {}, "willContinue": True}}]},
            "contents[0].parts[0].functionCall.willContinue",
        ),
    ],
)
def test_unconverted_gemini_fields_are_a_400_naming_their_path(
    server: ProxyServer, content: dict[str, Any], path: str
) -> None:
    url = f"{server.root_url}/s/t/v1beta/models/m:generateContent"
    r = httpx.post(url, json={"contents": [content, {"role": "user", "parts": [{"text": "go"}]}]}, timeout=60)
    assert r.status_code == 400 and path in r.json()["error"]["message"]


def test_google_genai_sees_an_unconverted_part_field_as_a_client_error(server: ProxyServer) -> None:
    video = genai_types.Part(text="hi", video_metadata=genai_types.VideoMetadata(fps=1))
    client = gemini(server)  # held: a collected Client closes its connection pool
    with pytest.raises(genai_errors.ClientError) as err:
        client.models.generate_content(model="m", contents=[genai_types.Content(role="user", parts=[video])])
    assert err.value.code == 400 and "contents[0].parts[0].videoMetadata" in str(err.value.message)


def test_a_reply_kept_as_several_model_contents_is_one_assistant_turn(scripted: Any) -> None:
    """Google's Chat helpers keep each streamed chunk as its own model content: consecutive model
    contents are one reply, so the history still matches what the proxy answered."""
    srv, engine = scripted
    engine.push("Hello there, friend.<|im_end|>", "ok<|im_end|>")
    url = f"{srv.root_url}/s/t/v1beta/models/m:generateContent"
    first = httpx.post(url, json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, timeout=60).json()
    text = first["candidates"][0]["content"]["parts"][0]["text"]
    pieces = [text[:5], text[5:], ""]
    contents = [{"role": "user", "parts": [{"text": "hi"}]}]
    contents += [{"role": "model", "parts": [{"text": piece}]} for piece in pieces]
    contents += [{"role": "user", "parts": [{"text": "and?"}]}]
    assert httpx.post(url, json={"contents": contents}, timeout=60).status_code == 200
    one_segment(srv, "t", 2)
    assert json.dumps(srv.trajectory("t").messages[1]) == json.dumps({"role": "assistant", "content": text})
