# mypy: disable-error-code="union-attr,arg-type,index"
"""Sampling values outside an API's documented range are that API's 400, in its own error shape, on
the plain and the streamed route alike -- never a 500 with a traceback, never silently sampled
(issue 28.3). Ranges as each API documents them: OpenAI temperature 0-2, top_p (0, 1]; Anthropic
temperature 0-1, top_p (0, 1], top_k >= 0; Gemini temperature 0-2, topP 0-1, topK >= 1 (as
integers), maxOutputTokens >= 1; max tokens >= 1 everywhere."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from lego.proxies.server import ProxyServer

USER = [{"role": "user", "content": "hi"}]
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("chat", {"temperature": -1}, "temperature"),
    ("chat", {"temperature": 2.5}, "temperature"),
    ("chat", {"top_p": 3}, "top_p"),
    ("chat", {"top_p": 0}, "top_p"),
    ("chat", {"max_tokens": 0}, "max_tokens"),
    ("chat", {"max_completion_tokens": -5}, "max_completion_tokens"),
    ("responses", {"temperature": 7}, "temperature"),
    ("responses", {"top_p": -0.5}, "top_p"),
    ("responses", {"max_output_tokens": 0}, "max_output_tokens"),
    ("messages", {"temperature": 1.5}, "temperature"),
    ("messages", {"top_p": 3}, "top_p"),
    ("messages", {"top_k": -1}, "top_k"),
    ("messages", {"max_tokens": 0}, "max_tokens"),
    ("gemini", {"temperature": -1}, "temperature"),
    ("gemini", {"temperature": 7}, "temperature"),
    ("gemini", {"topP": 3}, "topP"),
    ("gemini", {"topK": -1}, "topK"),
    ("gemini", {"topK": 2.5}, "topK"),
    ("gemini", {"maxOutputTokens": 0}, "maxOutputTokens"),
    ("gemini", {"temperature": "hot"}, "temperature"),
]


def post(srv: ProxyServer, api: str, extra: dict[str, Any], stream: bool) -> httpx.Response:
    root = f"{srv.root_url}/s/r"
    if api == "chat":
        body = {"model": "m", "messages": USER, "stream": stream, **extra}
        return httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30)
    if api == "responses":
        return httpx.post(f"{root}/v1/responses", json={"model": "m", "input": "hi", "stream": stream, **extra})
    if api == "messages":
        body = {"model": "m", "max_tokens": 8, "messages": USER, "stream": stream, **extra}
        return httpx.post(f"{root}/v1/messages", json=body, timeout=30)
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": extra}
    return httpx.post(f"{root}/v1beta/models/g:{method}", json=body, timeout=30)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("api", "extra", "field"), CASES, ids=[f"{a}-{f}={v[f]}" for a, v, f in CASES])
def test_out_of_range_sampling_is_the_apis_own_400_naming_the_field(
    server: ProxyServer, api: str, extra: dict[str, Any], field: str, stream: bool
) -> None:
    r = post(server, api, extra, stream)
    assert r.status_code == 400, r.text
    body = r.json()
    if api == "gemini":
        assert body["error"]["code"] == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
        assert field in body["error"]["message"]
    elif api == "messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert field in body["error"]["message"]
    else:
        assert body["error"]["type"] == "invalid_request_error" and field in (body["error"]["param"] or "")
    assert "Traceback" not in r.text and "pydantic" not in r.text


def test_in_range_edges_are_sampled(server: ProxyServer) -> None:
    for api, extra in [
        ("chat", {"temperature": 2, "top_p": 1, "max_tokens": 1}),
        ("messages", {"temperature": 1, "top_k": 0}),
        ("gemini", {"temperature": 0, "topP": 1, "topK": 1, "maxOutputTokens": 1}),
        ("gemini", {"temperature": 2, "topP": 0}),
    ]:
        assert post(server, api, extra, False).status_code == 200, (api, extra)


@pytest.mark.parametrize("stream", [False, True])
def test_google_genai_raises_its_client_error(server: ProxyServer, stream: bool) -> None:
    options = types.HttpOptions(
        base_url=f"{server.root_url}/s/g", api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)
    )
    client = genai.Client(api_key="k", http_options=options)
    config = types.GenerateContentConfig(temperature=7)
    with pytest.raises(errors.ClientError) as err:
        if stream:
            list(client.models.generate_content_stream(model="g", contents="hi", config=config))
        else:
            client.models.generate_content(model="g", contents="hi", config=config)
    assert err.value.code == 400 and "temperature" in str(err.value)
