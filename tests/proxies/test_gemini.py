# mypy: disable-error-code="union-attr,index,arg-type"
# (the client types every response field Optional; these tests check shapes at run time)
"""Google's own ``google-genai`` client against a real proxy serving the tiny model (the Gemini API face)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from lego.proxies.server import ProxyServer

CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>'
BASH = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="bash",
            description="Run a shell command.",
            parameters=types.Schema(
                type=types.Type.OBJECT, properties={"cmd": types.Schema(type=types.Type.STRING)}, required=["cmd"]
            ),
        )
    ]
)


class Clients:
    """google-genai clients of a proxy session through one face (as tests/proxies/test_sdk_clients.py):
    ``control`` (the session created on first use) or ``model`` (a model-face listener, the session
    opened first and its token as the API key, sent as ``x-goog-api-key``)."""

    def __init__(self, face: str) -> None:
        self.face = face
        self.roots: dict[int, str] = {}

    def root(self, srv: ProxyServer, session: str) -> tuple[str, str]:
        if self.face == "control":
            return f"{srv.root_url}/s/{session}", "k"
        if id(srv) not in self.roots:
            self.roots[id(srv)] = f"http://127.0.0.1:{srv.listen_tcp('127.0.0.1')}"
        return f"{self.roots[id(srv)]}/s/{session}", srv.open_session(session)

    def gemini(self, srv: ProxyServer, version: str = "v1beta", session: str = "t") -> genai.Client:
        root, key = self.root(srv, session)
        options = types.HttpOptions(
            base_url=root, api_version=version, retry_options=types.HttpRetryOptions(attempts=1)
        )
        return genai.Client(api_key=key, http_options=options)


@pytest.fixture(params=["control", "model"])
def clients(request: pytest.FixtureRequest) -> Clients:
    return Clients(request.param)


@pytest.mark.parametrize("version", ["v1", "v1beta"])
def test_text_reply_usage_matches_the_recorded_segment(server: ProxyServer, clients: Clients, version: str) -> None:
    client = clients.gemini(server, version)  # held: a collected Client closes its connection pool
    r = client.models.generate_content(
        model="gemini-2.5-pro",
        contents="hello",
        config=types.GenerateContentConfig(system_instruction="be brief", max_output_tokens=12, seed=3),
    )
    (cand,) = r.candidates
    assert cand.content.role == "model" and cand.finish_reason in (
        types.FinishReason.STOP,
        types.FinishReason.MAX_TOKENS,
    )
    assert r.model_version == "gemini-2.5-pro"
    traj = server.trajectory("t")
    (seg,) = traj.segments
    assert r.usage_metadata.prompt_token_count == len(seg.prompt_ids)
    assert r.usage_metadata.candidates_token_count == seg.num_sampled <= 12
    assert traj.messages[0] == {"role": "system", "content": "be brief"}
    assert (r.text or "") == traj.messages[-1]["content"]


def test_function_call_then_its_response_is_one_segment_of_the_sampled_tokens(
    scripted: Any, clients: Clients, chat_format: Any
) -> None:
    srv, engine = scripted
    engine.push("let me look\n" + CALL, "done<|im_end|>")
    client = clients.gemini(srv)
    config = types.GenerateContentConfig(system_instruction="agent", tools=[BASH])
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="list files")])]
    r = client.models.generate_content(model="m", contents=contents, config=config)
    (call,) = r.function_calls
    assert call.name == "bash" and call.args == {"cmd": "ls"} and call.id
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    contents += [
        r.candidates[0].content,
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(id=call.id, name="bash", response={"output": "a.py"})
                )
            ],
        ),
    ]
    r2 = client.models.generate_content(model="m", contents=contents, config=config)
    assert r2.text == "done"
    traj = srv.trajectory("t")
    (seg,) = traj.segments
    sampled = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m]
    assert sampled == chat_format.encode("let me look\n" + CALL) + chat_format.encode("done<|im_end|>")
    assert all(lp is not None for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if m)
    assert traj.messages[-2] == {"role": "tool", "tool_call_id": call.id, "content": '{"output": "a.py"}'}


def test_stream_sends_the_recorded_text_and_usage_last(server: ProxyServer, clients: Clients) -> None:
    client = clients.gemini(server)
    chunks = list(
        client.models.generate_content_stream(
            model="m", contents="hi", config=types.GenerateContentConfig(max_output_tokens=10)
        )
    )
    text = "".join(p.text or "" for c in chunks for p in c.candidates[0].content.parts or [] if not p.thought)
    traj = server.trajectory("t")
    assert text == traj.messages[-1]["content"]
    last = chunks[-1]
    assert last.candidates[0].finish_reason is not None
    assert last.usage_metadata.candidates_token_count == traj.segments[0].num_sampled


def test_stream_with_a_function_call(scripted: Any, clients: Clients) -> None:
    srv, engine = scripted
    engine.push("let me look\n" + CALL)
    client = clients.gemini(srv, "v1")
    chunks = list(
        client.models.generate_content_stream(
            model="m", contents="list files", config=types.GenerateContentConfig(tools=[BASH])
        )
    )
    calls = [fc for c in chunks for fc in c.function_calls or []]
    assert [(fc.name, fc.args) for fc in calls] == [("bash", {"cmd": "ls"})]
    assert srv.trajectory("t").messages[-1]["tool_calls"][0]["id"] == calls[0].id


def test_forced_function_call_through_tool_config(scripted: Any, clients: Clients) -> None:
    srv, engine = scripted
    engine.push('{"cmd": "pwd"}}\n</tool_call><|im_end|>')  # the proxy forced '<tool_call>...bash", "arguments": '

    mode = types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["bash"])
    config = types.GenerateContentConfig(tools=[BASH], tool_config=types.ToolConfig(function_calling_config=mode))
    client = clients.gemini(srv)
    r = client.models.generate_content(model="m", contents="where am I", config=config)
    assert [(fc.name, fc.args) for fc in r.function_calls] == [("bash", {"cmd": "pwd"})]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (types.GenerateContentConfig(candidate_count=2), "generationConfig.candidateCount"),
        (types.GenerateContentConfig(response_mime_type="application/json"), "generationConfig.responseMimeType"),
        (types.GenerateContentConfig(presence_penalty=0.5), "generationConfig.presencePenalty"),
        (
            types.GenerateContentConfig(
                tools=[types.Tool(computer_use=types.ComputerUse(environment="ENVIRONMENT_BROWSER"))]
            ),
            "tools[0].computerUse",
        ),  # a client-run tool the proxy cannot express (a hosted one is left out: test_hosted_tools.py)
    ],
)
def test_unsupported_options_are_typed_400s_naming_the_field(
    server: ProxyServer, clients: Clients, config: types.GenerateContentConfig, field: str
) -> None:
    client = clients.gemini(server)
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model="m", contents="hi", config=config)
    assert exc.value.code == 400 and exc.value.status == "INVALID_ARGUMENT"
    assert field in exc.value.message
    if clients.face == "model":
        assert server.trajectory("t").segments == []


def test_model_face_keys_and_routes(server: ProxyServer) -> None:
    root = f"http://127.0.0.1:{server.listen_tcp('127.0.0.1')}"
    token = server.open_session("t")
    bad = genai.Client(
        api_key="not-a-session",
        http_options=types.HttpOptions(base_url=root, retry_options=types.HttpRetryOptions(attempts=1)),
    )
    with pytest.raises(errors.ClientError) as exc:
        bad.models.generate_content(model="m", contents="hi")
    assert exc.value.code == 401 and exc.value.status == "UNAUTHENTICATED"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 4}}
    r = httpx.post(f"{root}/v1beta/models/m:generateContent", params={"key": token}, json=body, timeout=60)
    assert r.status_code == 200 and r.json()["candidates"][0]["content"]["role"] == "model"
    r = httpx.post(f"{root}/v1beta/models/m:countTokens", params={"key": token}, json=body, timeout=60)
    assert r.json()["totalTokens"] == len(server.trajectory("t").segments[0].prompt_ids)
    r = httpx.post(f"{root}/v1beta/models/m:embedContent", params={"key": token}, json=body, timeout=60)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = httpx.get(f"{root}/v1/models/m", headers={"x-goog-api-key": token}, timeout=60)
    assert r.status_code == 200 and r.json()["id"] == "m"  # the model card route is still GET /v1/models/{id}
    r = httpx.post(f"{root}/v1beta/models/m:streamGenerateContent", params={"key": token}, json=body, timeout=60)
    assert r.status_code == 400 and "alt=sse" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("thinking", "enabled"),
    [({"thinkingBudget": 0}, False), ({"thinkingBudget": -1}, True), ({"thinkingLevel": "LOW"}, True)],
)
def test_thinking_config_is_the_templates_switch(thinking: dict[str, Any], enabled: bool) -> None:
    from lego.proxies import gemini

    body = {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"thinkingConfig": thinking}}
    creq = gemini.to_chat_request(gemini.GenerateContentRequest.model_validate(body), "m", stream=False)
    assert creq.chat_template_kwargs == {"enable_thinking": enabled}


@pytest.mark.parametrize("include", [None, False])
def test_reasoning_comes_back_as_thought_parts_unless_turned_off(
    scripted: Any, clients: Clients, include: bool | None
) -> None:
    srv, engine = scripted
    engine.push("<think>\nhmm\n</think>\n\nanswer<|im_end|>")
    client = clients.gemini(srv)
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=include))
    r = client.models.generate_content(model="m", contents="hi", config=config)
    parts = [(bool(p.thought), p.text) for p in r.candidates[0].content.parts]
    assert parts == ([(False, "answer")] if include is False else [(True, "hmm"), (False, "answer")])


def test_a_function_response_without_an_id_answers_the_call_of_its_name(scripted: Any, clients: Clients) -> None:
    srv, engine = scripted
    engine.push(CALL, "done<|im_end|>")
    client = clients.gemini(srv)
    config = types.GenerateContentConfig(tools=[BASH])
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="list files")])]
    r = client.models.generate_content(model="m", contents=contents, config=config)
    (call,) = r.function_calls
    response = types.FunctionResponse(name="bash", response={"output": "a.py"})
    contents += [r.candidates[0].content, types.Content(role="user", parts=[types.Part(function_response=response)])]
    assert client.models.generate_content(model="m", contents=contents, config=config).text == "done"
    traj = srv.trajectory("t")
    assert traj.messages[-2]["tool_call_id"] == call.id and len(traj.segments) == 1
