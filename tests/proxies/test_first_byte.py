# mypy: disable-error-code="union-attr,arg-type,attr-defined,index,misc"
"""A stream opens and pings before its first token: a long prompt's prefill sends bytes.

``SlowPrefill`` is the real tiny-model engine with its first token held back ``DELAY`` seconds (what a
30k-token prompt's prefill looks like to a client). Raw httpx reads time each byte; the official SDKs
(openai, anthropic, google-genai) read the same streams and must assemble the same final message the
proxy recorded. Errors the proxy can see before the engine starts keep their HTTP status; errors after
the stream opened arrive as the API's error event.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
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
from lego.proxies.server import ProxyServer
from tests.proxies.slow_prefill import SlowPrefill

DELAY = 2.0  # seconds before the first token
PING = 0.25  # the service's ping interval here (the commit grace is never longer)
USER = [{"role": "user", "content": "Write about a lighthouse."}]


@pytest.fixture(scope="module")
def slow(tiny_model_dir: Path, chat_format: Any) -> Iterator[tuple[ProxyServer, Any]]:
    from lego.engines.transformers_engine import TransformersEngine

    real = TransformersEngine(
        tiny_model_dir, device="cpu", max_batch_size=1, seed=0, prefix_cache=False, max_model_len=4096
    )
    with ProxyServer(SlowPrefill(real, DELAY), chat_format, ProxyConfig(port=0, default_max_tokens=16)) as srv:  # type: ignore[arg-type]
        srv.service.ping_interval_s = PING
        yield srv, real


FACES = {
    "chat": (
        "/v1/chat/completions",
        {"model": "m", "messages": USER, "max_tokens": 16, "stream": True},
        b'"role":"assistant"',
        b": ping",
    ),
    "messages": (
        "/v1/messages",
        {"model": "m", "messages": USER, "max_tokens": 16, "stream": True},
        b"event: message_start",
        b"event: ping",
    ),
    "responses": (
        "/v1/responses",
        {"model": "m", "input": "hi", "max_output_tokens": 16, "stream": True},
        b"response.in_progress",
        b": ping",
    ),
    "gemini": (
        "/v1beta/models/m:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 16}},
        b'"parts":[{"text":""}]',
        b'"parts":[{"text":""}]',
    ),
}


def timed_stream(url: str, body: dict[str, Any]) -> tuple[float, list[tuple[float, bytes]]]:
    """(seconds to the response headers, [(seconds, bytes)] of every read) of a streamed POST."""
    t0 = time.perf_counter()
    with httpx.Client(timeout=60) as c, c.stream("POST", url, json=body) as r:
        headers_at = time.perf_counter() - t0
        assert r.status_code == 200, r.read()
        reads = [(time.perf_counter() - t0, piece) for piece in r.iter_raw()]
    return headers_at, reads


@pytest.mark.parametrize("face", list(FACES))
def test_a_slow_prefill_opens_the_stream_and_pings_before_the_first_token(
    slow: tuple[ProxyServer, Any], face: str
) -> None:
    srv, _ = slow
    path, body, opening, ping = FACES[face]  # Gemini has no opening event: its first keep-alive opens it
    headers_at, reads = timed_stream(f"{srv.root_url}/s/open-{face}{path}", body)
    seen, opened_at, pinged_at = b"", None, None
    for at, piece in reads:
        seen += piece
        if opened_at is None and opening in seen:
            opened_at = at
        if pinged_at is None and opened_at is not None and seen.count(ping) >= (2 if ping == opening else 1):
            pinged_at = at
    assert headers_at < DELAY / 2, f"headers after {headers_at:.2f}s"
    assert opened_at is not None and opened_at < DELAY / 2, f"opening events after {opened_at}s"
    assert pinged_at is not None and pinged_at < DELAY, f"first keep-alive after {pinged_at}s"
    assert reads[-1][0] >= DELAY  # the tokens themselves came after the prefill
    print(
        f"{face}: headers {headers_at:.2f}s, opening {opened_at:.2f}s, ping {pinged_at:.2f}s, end {reads[-1][0]:.2f}s"
    )


def test_sdks_assemble_the_recorded_reply_from_a_stream_that_pinged_first(slow: tuple[ProxyServer, Any]) -> None:
    srv, _ = slow
    root = srv.root_url

    def recorded(session: str) -> str:
        return str(srv.trajectory(session).messages[-1]["content"])

    oai = openai.OpenAI(base_url=f"{root}/s/sdk-chat/v1", api_key="k", max_retries=0)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in oai.chat.completions.create(model="m", messages=USER, max_tokens=16, stream=True)
        if c.choices
    )
    assert text == recorded("sdk-chat")

    claude = anthropic.Anthropic(base_url=f"{root}/s/sdk-msg", api_key="k", max_retries=0)
    with claude.messages.stream(model="m", max_tokens=16, messages=USER) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start"  # (the SDK's iterator drops pings; the raw reads above see them)
    assert "".join(b.text for b in final.content if b.type == "text") == recorded("sdk-msg")

    resp = openai.OpenAI(base_url=f"{root}/s/sdk-resp/v1", api_key="k", max_retries=0)
    events = list(resp.responses.create(model="m", input="hi", max_output_tokens=16, stream=True))
    done = next(e for e in events if e.type == "response.completed").response
    assert done.output_text == recorded("sdk-resp")

    options = genai_types.HttpOptions(
        base_url=f"{root}/s/sdk-gem", retry_options=genai_types.HttpRetryOptions(attempts=1)
    )
    google = genai.Client(api_key="k", http_options=options)
    chunks = list(
        google.models.generate_content_stream(
            model="m", contents="hi", config=genai_types.GenerateContentConfig(max_output_tokens=16)
        )
    )
    assert chunks[0].text == ""  # keep-alives came first, read as chunks without text
    assert "".join(c.text or "" for c in chunks) == recorded("sdk-gem")
    assert chunks[-1].candidates[0].finish_reason is not None


def test_google_chat_keeps_a_streamed_turn_that_pinged_in_its_history(slow: tuple[ProxyServer, Any]) -> None:
    """google-genai's Chat keeps every streamed chunk (keep-alives included) as a model content and
    sends them back: still one valid turn, one assistant message, one segment."""
    srv, _ = slow
    options = genai_types.HttpOptions(
        base_url=f"{srv.root_url}/s/chat", retry_options=genai_types.HttpRetryOptions(attempts=1)
    )
    google = genai.Client(api_key="k", http_options=options)
    chat = google.chats.create(model="m", config=genai_types.GenerateContentConfig(max_output_tokens=8))
    first = "".join(c.text or "" for c in chat.send_message_stream("hi"))
    list(chat.send_message_stream("more"))
    assert chat.get_history(curated=True)[0].parts[0].text == "hi"  # the first turn was valid: it was kept
    traj = srv.trajectory("chat")
    assert traj.messages[1]["content"] == first and traj.messages[2] == {"role": "user", "content": "more"}
    assert len(traj.segments) == 1 and traj.counters["calls"] == 2


def test_an_error_after_the_stream_opened_is_the_apis_error_event(slow: tuple[ProxyServer, Any]) -> None:
    """The rollout seals the session while the engine prefills: each SDK raises the proxy's error."""
    srv, _ = slow
    port = srv.listen_tcp("127.0.0.1")

    def seal_once_open(session: str) -> None:
        threading.Timer(DELAY / 2, srv.service.seal_session, args=(session,)).start()

    token = srv.open_session("late-chat")
    seal_once_open("late-chat")
    oai = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.APIError, match="has ended"):
        list(oai.chat.completions.create(model="m", messages=USER, max_tokens=8, stream=True))

    token = srv.open_session("late-msg")
    seal_once_open("late-msg")
    claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=token, max_retries=0)
    with pytest.raises(anthropic.APIStatusError, match="has ended"):
        with claude.messages.stream(model="m", max_tokens=8, messages=USER) as stream:
            list(stream)

    token = srv.open_session("late-gem")
    seal_once_open("late-gem")
    options = genai_types.HttpOptions(
        base_url=f"http://127.0.0.1:{port}", retry_options=genai_types.HttpRetryOptions(attempts=1)
    )
    google = genai.Client(api_key=token, http_options=options)
    with pytest.raises(genai_errors.APIError, match="has ended") as err:
        list(google.models.generate_content_stream(model="m", contents="hi"))
    assert err.value.code == 401


def test_errors_found_before_the_engine_keep_their_status(
    slow: tuple[ProxyServer, Any], tiny_model_dir: Path, chat_format: Any
) -> None:
    srv, _ = slow
    oai = openai.OpenAI(base_url=f"{srv.root_url}/s/early/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:  # the context overflows: refused before the engine
        huge = [{"role": "user", "content": "word " * 5000}]
        list(oai.chat.completions.create(model="m", messages=huge, stream=True))
    assert info.value.status_code == 400
    port = srv.listen_tcp("127.0.0.1")
    stranger = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="no-such-session", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):  # an unknown session key: a real 401
        with stranger.messages.stream(model="m", max_tokens=8, messages=USER) as stream:
            list(stream)
    from lego.engines.transformers_engine import TransformersEngine

    closed = TransformersEngine(tiny_model_dir, device="cpu")
    asyncio.run(closed.close())
    with ProxyServer(closed, chat_format, ProxyConfig(port=0)) as down:
        r = httpx.post(f"{down.base_url}/chat/completions", json={"model": "m", "messages": USER, "stream": True})
        assert r.status_code == 503 and r.headers["retry-after"]  # the engine refused at once: a real status


def test_a_client_leaving_during_the_prefill_cancels_the_generation(slow: tuple[ProxyServer, Any]) -> None:
    srv, real = slow
    before = real.stats["generated_tokens"]
    body = {"model": "m", "messages": USER, "max_tokens": 16, "stream": True}
    with httpx.Client(timeout=60) as c, c.stream("POST", f"{srv.root_url}/s/left/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith(": ping"):
                break  # the stream is open and idle: leave before the first token
    time.sleep(DELAY + 1.0)  # past the prefill: a generation still running would be sampling by now
    assert real.stats["generated_tokens"] == before
    assert srv.trajectory("left").segments == []
