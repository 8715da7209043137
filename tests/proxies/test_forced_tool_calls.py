# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
# (the SDKs type requests as TypedDict unions and responses as wide unions; these tests check shapes at run time)
"""A forcing ``tool_choice`` is a promise the APIs make: the reply *is* a call of the named tool, with
arguments valid against its schema (issue 28). The real tiny model -- random weights, which never
write a call by themselves -- is asked through each official SDK, so what makes the call happen is
the constrained decoding alone: the tool-call opening is forced, the arguments are sampled under a
mask that keeps them inside the schema's language and inside ``max_tokens``.

The constrained tokens are recorded, flagged (``Segment.constrained_spans``) and kept out of the
loss (mask 0): they were drawn from the constrained distribution, not the policy's.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import jsonschema
import openai
import pytest
from google import genai
from google.genai import types

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cmd": {"type": "string", "description": "the command line"},
        "timeout": {"type": "integer"},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "env": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "dry_run": {"type": "boolean"},
    },
    "required": ["cmd", "mode"],
}
READ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "lines": {"type": ["integer", "null"]}},
    "required": ["path"],
}
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": SCHEMA}}
READ = {"type": "function", "function": {"name": "read", "parameters": READ_SCHEMA}}
USER = [{"role": "user", "content": "list the files"}]


def oai(srv: ProxyServer, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.root_url}/s/{session}/v1", api_key="k", max_retries=0)


def assert_recorded_as_constrained(srv: ProxyServer, session: str) -> None:
    """The call's tokens are in the segment, flagged, and none of them is trained on (mask 0)."""
    traj = srv.trajectory(session)
    (seg,) = traj.segments
    assert seg.constrained_spans, "a forced call's tokens are flagged as constrained"
    for start, end in seg.constrained_spans:
        assert end > start and set(seg.response_mask[start:end]) == {0}
        assert all(lp is not None for lp in seg.response_logprobs[start:end])  # the engine's, kept for inspection
    assert traj.counters["constrained_tokens"] == sum(e - s for s, e in seg.constrained_spans)
    assert traj.counters["tool_choice_failures"] == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("max_tokens", [24, 96])
def test_chat_named_function_is_always_called_with_arguments_valid_against_its_schema(
    server: ProxyServer, seed: int, max_tokens: int
) -> None:
    r = oai(server, f"c{seed}-{max_tokens}").chat.completions.create(
        model="m",
        messages=USER,
        tools=[READ, BASH],
        tool_choice={"type": "function", "function": {"name": "bash"}},
        max_tokens=max_tokens,
        seed=seed,
        temperature=1.0,
    )
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "bash" and r.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMA)
    assert_recorded_as_constrained(server, f"c{seed}-{max_tokens}")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chat_required_calls_one_of_the_declared_tools(server: ProxyServer, seed: int) -> None:
    r = oai(server, f"r{seed}").chat.completions.create(
        model="m", messages=USER, tools=[READ, BASH], tool_choice="required", max_tokens=48, seed=seed
    )
    (call,) = r.choices[0].message.tool_calls
    schema = {"bash": SCHEMA, "read": READ_SCHEMA}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_a_streamed_forced_call_arrives_as_tool_call_deltas(server: ProxyServer) -> None:
    chunks = list(
        oai(server, "st").chat.completions.create(
            model="m",
            messages=USER,
            tools=[BASH],
            tool_choice={"type": "function", "function": {"name": "bash"}},
            max_tokens=40,
            stream=True,
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "bash"
    jsonschema.validate(json.loads("".join(d.function.arguments or "" for d in deltas)), SCHEMA)


def test_responses_named_function_is_always_called(server: ProxyServer) -> None:
    fn = {"type": "function", "name": "bash", "parameters": SCHEMA}
    r = oai(server, "resp").responses.create(
        model="m",
        input="list files",
        tools=[fn],
        tool_choice={"type": "function", "name": "bash"},
        max_output_tokens=40,
    )
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "bash"
    jsonschema.validate(json.loads(call.arguments), SCHEMA)
    assert_recorded_as_constrained(server, "resp")


def test_anthropic_tool_choice_tool_is_always_called(server: ProxyServer) -> None:
    client = anthropic.Anthropic(base_url=f"{server.root_url}/s/anth", api_key="k", max_retries=0)
    r = client.messages.create(
        model="m",
        max_tokens=40,
        messages=[{"role": "user", "content": "where am I"}],
        tools=[{"name": "bash", "input_schema": SCHEMA}, {"name": "read", "input_schema": READ_SCHEMA}],
        tool_choice={"type": "tool", "name": "bash"},
    )
    (block,) = [b for b in r.content if b.type == "tool_use"]
    assert block.name == "bash" and r.stop_reason == "tool_use"
    jsonschema.validate(block.input, SCHEMA)
    assert_recorded_as_constrained(server, "anth")


def test_gemini_mode_any_with_an_allowed_function_is_always_called(server: ProxyServer) -> None:
    options = types.HttpOptions(
        base_url=f"{server.root_url}/s/gem", api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)
    )
    client = genai.Client(api_key="k", http_options=options)
    decl = types.FunctionDeclaration(name="bash", parameters_json_schema=SCHEMA)
    r = client.models.generate_content(
        model="gemini-2.5-pro",
        contents="list files",
        config=types.GenerateContentConfig(
            tools=[types.Tool(function_declarations=[decl])],
            tool_config=types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(mode="ANY", allowed_function_names=["bash"])
            ),
            max_output_tokens=40,
        ),
    )
    (call,) = r.function_calls
    assert call.name == "bash"
    jsonschema.validate(call.args, SCHEMA)


def test_qwen3_coder_format_forces_its_xml_call_with_typed_parameters(tiny_engine: Any, chat_format: Any) -> None:
    from lego.models.chat import ChatFormat
    from lego.models.tiny import chat_template

    coder = ChatFormat(chat_format.tokenizer, chat_template=chat_template("qwen3_coder"), tool_parser="qwen3_coder")
    with ProxyServer(tiny_engine, coder, ProxyConfig(port=0)) as srv:
        for seed in range(3):
            r = oai(srv, f"x{seed}").chat.completions.create(
                model="m",
                messages=USER,
                tools=[BASH, READ],
                tool_choice={"type": "function", "function": {"name": "bash"}},
                max_tokens=48,
                seed=seed,
            )
            (call,) = r.choices[0].message.tool_calls
            assert call.function.name == "bash"
            jsonschema.validate(json.loads(call.function.arguments), SCHEMA)


def test_a_forced_call_that_cannot_fit_max_tokens_is_a_400_naming_max_tokens(server: ProxyServer) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai(server, "tight").chat.completions.create(
            model="m",
            messages=USER,
            tools=[BASH],
            tool_choice={"type": "function", "function": {"name": "bash"}},
            max_tokens=3,
        )
    assert err.value.body["param"] == "max_tokens"


def test_the_vllm_path_passes_the_constraint_as_structured_outputs(tiny_model_dir: Any, chat_format: Any) -> None:
    """Against the stand-in `vllm serve` (vLLM's wire format, a real engine behind it): the forced call's
    constraint travels as ``structured_outputs.regex`` and the call comes back valid and flagged."""
    from lego.engines.vllm import VLLMEngine
    from tests.engines.vllm_standin import VLLMStandIn

    with VLLMStandIn(tiny_model_dir) as standin:
        with ProxyServer(VLLMEngine(standin.url), chat_format, ProxyConfig(port=0)) as srv:
            r = oai(srv, "v").chat.completions.create(
                model="m",
                messages=USER,
                tools=[BASH],
                tool_choice={"type": "function", "function": {"name": "bash"}},
                max_tokens=40,
            )
            (call,) = r.choices[0].message.tool_calls
            jsonschema.validate(json.loads(call.function.arguments), SCHEMA)
            assert_recorded_as_constrained(srv, "v")
        (sent,) = standin.structured
        assert sent is not None and set(sent) == {"regex"} and sent["regex"].endswith("</tool_call>")


def test_a_subset_of_allowed_tools_is_enforced_on_openai_and_gemini(server: ProxyServer) -> None:
    """OpenAI's ``allowed_tools`` (mode required) and Gemini's ``mode: ANY`` with several of the declared
    functions: a call of one of the allowed ones, never of the others."""
    extra = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [BASH, READ]}}
    for seed in range(3):
        r = oai(server, f"al{seed}").chat.completions.create(
            model="m", messages=USER, tools=[extra, READ, BASH], tool_choice=allowed, max_tokens=48, seed=seed
        )
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name in ("bash", "read")
        jsonschema.validate(
            json.loads(call.function.arguments), {"bash": SCHEMA, "read": READ_SCHEMA}[call.function.name]
        )
    options = types.HttpOptions(
        base_url=f"{server.root_url}/s/gsub", api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)
    )
    decls = [
        types.FunctionDeclaration(name="noop", parameters_json_schema={"type": "object", "properties": {}}),
        types.FunctionDeclaration(name="bash", parameters_json_schema=SCHEMA),
        types.FunctionDeclaration(name="read", parameters_json_schema=READ_SCHEMA),
    ]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=decls)],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode="ANY", allowed_function_names=["bash", "read"])
        ),
        max_output_tokens=48,
    )
    client = genai.Client(api_key="k", http_options=options)  # held: a collected Client closes its pool
    r = client.models.generate_content(model="g", contents="list files", config=config)
    (call,) = r.function_calls
    assert call.name in ("bash", "read")
