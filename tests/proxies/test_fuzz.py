"""Bad input of every kind gets the calling API's own 4xx (or a clean cancel), and the next request
is served."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer

GOOD_CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
GOOD_MSG = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}


def _still_serves(srv: ProxyServer) -> None:
    r = httpx.post(f"{srv.base_url}/chat/completions", json=GOOD_CHAT, timeout=60)
    assert r.status_code == 200, r.text


def _openai_error(r: httpx.Response, status: int, needle: str = "") -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert {"message", "type", "param", "code"} <= set(err) and needle in err["message"]


def _anthropic_error(r: httpx.Response, status: int, kind: str, needle: str = "") -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and needle in body["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/chat/completions", b"{not json", "not valid JSON"),
        ("/chat/completions", b"[1, 2]", "JSON object"),
        ("/chat/completions", b'{"model": "m"}', "messages"),
        ("/chat/completions", b'{"messages": "hello"}', "messages"),
        ("/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "lots"}', "max_tokens"),
        ("/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "temperature"),
        ("/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', "unknown role"),
        ("/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', "n > 1"),
        (
            "/chat/completions",
            b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
            "images are unsupported",
        ),
        ("/chat/completions", b'{"messages": [{"role": "tool", "content": "x"}]}', "tool_call_id"),
        (
            "/chat/completions",
            b'{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}, {"role": "tool", "tool_call_id": "c", "content": "r"}]}',
            "not valid JSON",
        ),
        ("/responses", b'{"input": [{"type": "telepathy"}]}', "unsupported input item"),
        ("/responses", b'{"input": 5}', "input"),
        ("/responses", b'{"input": "x", "previous_response_id": "resp_nope"}', "previous_response_id"),
    ],
)
def test_bad_openai_requests_get_400(server: ProxyServer, path: str, body: bytes, needle: str) -> None:
    r = httpx.post(server.base_url + path, content=body, headers={"content-type": "application/json"})
    _openai_error(r, 400, needle)
    _still_serves(server)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{bad", "not valid JSON"),
        (b'{"max_tokens": 5}', "messages"),
        (b'{"max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]}', "unknown role"),
        (
            b'{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}',
            "images are unsupported",
        ),
        (b'{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}', "tool_use_id"),
    ],
)
def test_bad_anthropic_requests_get_400_in_anthropic_shape(server: ProxyServer, body: bytes, needle: str) -> None:
    r = httpx.post(f"{server.root_url}/v1/messages", content=body, headers={"content-type": "application/json"})
    _anthropic_error(r, 400, "invalid_request_error", needle)
    _still_serves(server)


def test_ten_megabyte_body_is_413(server: ProxyServer) -> None:
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * (10 * 1024 * 1024)}]}
    _openai_error(httpx.post(f"{server.base_url}/chat/completions", json=big), 413)
    _anthropic_error(httpx.post(f"{server.root_url}/v1/messages", json=big), 413, "request_too_large")
    _still_serves(server)


def test_client_dropping_a_stream_halfway_leaves_the_server_serving(server: ProxyServer) -> None:
    body = {**GOOD_CHAT, "stream": True, "max_tokens": 20}
    with httpx.Client() as c, c.stream("POST", f"{server.base_url}/chat/completions", json=body) as r:
        assert r.status_code == 200
        next(r.iter_raw())  # read one piece, then hang up
    _still_serves(server)


def test_client_leaving_during_generation_cancels_it_cleanly(scripted: Any) -> None:
    srv, engine = scripted
    engine.delay = 30.0
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{srv.session_base_url('gone')}/chat/completions", json=GOOD_CHAT, timeout=0.5)
    engine.delay = 0.0
    r = httpx.post(f"{srv.session_base_url('gone')}/chat/completions", json=GOOD_CHAT, timeout=60)
    assert r.status_code == 200
    assert srv.trajectory("gone").counters["calls"] == 1  # the abandoned generation was not recorded


def test_api_key_is_required_on_every_route_when_set(tiny_engine: Any, chat_format: Any) -> None:
    with ProxyServer(tiny_engine, chat_format, ProxyConfig(port=0, api_key="s3cret", default_max_tokens=2)) as srv:
        assert httpx.get(f"{srv.root_url}/healthz").status_code == 401
        _openai_error(httpx.post(f"{srv.base_url}/chat/completions", json=GOOD_CHAT), 401)
        _anthropic_error(httpx.post(f"{srv.root_url}/v1/messages", json=GOOD_MSG), 401, "authentication_error")
        assert (
            httpx.post(
                f"{srv.base_url}/chat/completions", json=GOOD_CHAT, headers={"authorization": "Bearer s3cret"}
            ).status_code
            == 200
        )
        headers = {"x-api-key": "s3cret", "anthropic-version": "2023-06-01"}
        assert httpx.post(f"{srv.root_url}/v1/messages", json=GOOD_MSG, headers=headers).status_code == 200
        assert httpx.get(f"{srv.base_url}/models", headers=headers).json()["data"][0]["id"] == "lego-policy"


def test_engine_failure_is_503_with_a_retry_hint(tiny_model_dir: Any, chat_format: Any) -> None:
    from lego.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(tiny_model_dir, device="cpu")
    asyncio.run(engine.close())
    with ProxyServer(engine, chat_format, ProxyConfig(port=0)) as srv:
        r = httpx.post(f"{srv.base_url}/chat/completions", json=GOOD_CHAT)
        _openai_error(r, 503, "unavailable")
        assert r.headers["retry-after"] and r.headers["x-should-retry"] == "true"
        _anthropic_error(httpx.post(f"{srv.root_url}/v1/messages", json=GOOD_MSG), 503, "overloaded_error")


def test_session_routes(server: ProxyServer) -> None:
    assert httpx.get(f"{server.root_url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{server.base_url}/models/claude-opus-4-1").json()["id"] == "claude-opus-4-1"
    assert httpx.get(f"{server.root_url}/s/none/trajectory").status_code == 404
    r = httpx.post(f"{server.session_base_url('a')}/chat/completions", json=GOOD_CHAT)
    assert r.status_code == 200
    traj = httpx.get(f"{server.root_url}/s/a/trajectory").json()
    assert traj["session_id"] == "a" and len(traj["segments"]) == 1
    assert httpx.delete(f"{server.root_url}/s/a").status_code == 200
    assert httpx.delete(f"{server.root_url}/s/a").status_code == 404


def test_binding_a_non_loopback_address_without_a_key_warns(
    tiny_engine: Any, chat_format: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level("WARNING", logger="lego.proxy"),
        ProxyServer(tiny_engine, chat_format, ProxyConfig(host="0.0.0.0", port=0)) as srv,
    ):
        assert srv.root_url.startswith("http://127.0.0.1:")
    assert any("without an API key" in r.getMessage() for r in caplog.records)
