"""proxy.max_tokens_cap bounds every completion, whatever the request asks (Claude Code asks for 32k)."""

from __future__ import annotations

from typing import Any

import httpx

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer


def test_cap_bounds_a_request_that_asks_for_more(tiny_engine: Any, chat_format: Any) -> None:
    with ProxyServer(tiny_engine, chat_format, ProxyConfig(port=0, max_tokens_cap=3)) as srv:
        body = {"model": "claude-x", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"{srv.anthropic_base_url}/v1/messages", json=body, timeout=60)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert 1 <= usage["output_tokens"] <= 3
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"{srv.base_url}/chat/completions", json=chat, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3
