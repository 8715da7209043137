# mypy: disable-error-code="union-attr,arg-type,index,call-overload"
"""Hosted tools -- the ones the API provider itself runs (OpenAI's ``web_search``, Anthropic's server
tools, Gemini's ``googleSearch``) -- cannot run behind this proxy: the policy has no search engine and
the sandbox no network. Codex declares ``web_search`` when its config enables search (issue 28.7).
Decision: such a tool is left out of what the policy is offered, with a note -- the response header
``x-lego-dropped-tools`` and the trajectory counter ``hosted_tools_dropped`` -- so the request is
served as if the provider had the tool switched off; tools the *client* runs but the proxy cannot
express (Responses ``local_shell``, Anthropic's schema-less ``bash_20250124``) stay a 400 naming them.
And Codex's adapter does not declare it: its config turns web search off."""

from __future__ import annotations

import tomllib
from typing import Any

import anthropic
import httpx
import openai
import pytest

from lego.proxies.server import ProxyServer

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command and returns its output.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}},
}


def test_a_codex_shaped_request_with_web_search_is_served_without_it(server: ProxyServer) -> None:
    client = openai.OpenAI(base_url=f"{server.root_url}/s/codex/v1", api_key="k", max_retries=0)
    raw = client.responses.with_raw_response.create(
        model="gpt-5-codex",
        instructions="You are Codex, a coding agent.",
        input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]}],
        tools=[SHELL, {"type": "web_search"}],
        tool_choice="auto",
        parallel_tool_calls=False,
        reasoning={"effort": "medium", "summary": "auto"},
        store=False,
        include=["reasoning.encrypted_content"],
        max_output_tokens=8,
    )
    assert raw.headers["x-lego-dropped-tools"] == "web_search"
    assert raw.parse().status in ("completed", "incomplete")
    traj = server.trajectory("codex")
    assert [t["function"]["name"] for t in traj.tools] == ["shell"]
    assert traj.counters["hosted_tools_dropped"] == 1


def test_the_same_on_a_stream(server: ProxyServer) -> None:
    client = openai.OpenAI(base_url=f"{server.root_url}/s/cs/v1", api_key="k", max_retries=0)
    events = list(
        client.responses.create(
            model="m", input="hi", tools=[SHELL, {"type": "web_search_preview"}], stream=True, max_output_tokens=4
        )
    )
    assert events[-1].type == "response.completed"
    assert server.trajectory("cs").counters["hosted_tools_dropped"] == 1


def test_anthropic_server_tools_and_gemini_built_ins_likewise(server: ProxyServer) -> None:
    client = anthropic.Anthropic(base_url=f"{server.root_url}/s/a", api_key="k", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="m",
        max_tokens=4,
        messages=[{"role": "user", "content": "search it"}],
        tools=[
            {"name": "read", "input_schema": {"type": "object", "properties": {}}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
    )
    assert raw.headers["x-lego-dropped-tools"] == "web_search"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]}
    r = httpx.post(f"{server.root_url}/s/g/v1beta/models/g:generateContent", json=body, timeout=60)
    assert r.status_code == 200 and r.headers["x-lego-dropped-tools"] == "googleSearch"
    assert server.trajectory("g").counters["hosted_tools_dropped"] == 1


@pytest.mark.parametrize(
    ("api", "tool", "param"),
    [
        ("responses", {"type": "local_shell"}, "tools[1].type"),
        ("messages", {"type": "bash_20250124", "name": "bash"}, "tools[1].type"),
    ],
)
def test_client_tools_the_proxy_cannot_express_stay_a_400(
    server: ProxyServer, api: str, tool: dict[str, Any], param: str
) -> None:
    if api == "responses":
        client = openai.OpenAI(base_url=f"{server.root_url}/s/x/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model="m", input="hi", tools=[SHELL, tool], max_output_tokens=4)
        assert err.value.body["param"] == param
    else:
        claude = anthropic.Anthropic(base_url=f"{server.root_url}/s/x", api_key="k", max_retries=0)
        read = {"name": "read", "input_schema": {"type": "object", "properties": {}}}
        with pytest.raises(anthropic.BadRequestError) as aerr:
            claude.messages.create(
                model="m", max_tokens=4, messages=[{"role": "user", "content": "x"}], tools=[read, tool]
            )
        assert param in aerr.value.message


def test_codex_adapter_config_turns_web_search_off() -> None:
    from lego.harnesses.codex import CodexHarness
    from lego.types import Endpoint

    cfg = tomllib.loads(CodexHarness().config_toml(Endpoint(base_url="http://x/v1", anthropic_base_url="http://x")))
    assert cfg["web_search"] == "disabled"
    assert not cfg.get("tools", {}).get("web_search") and not cfg.get("features", {}).get("web_search_request")
