# mypy: disable-error-code="union-attr,arg-type,attr-defined,index"
"""Token streaming through the real proxy and the real tiny model, read with the official SDKs.

The engine here never stops early: its end-of-sequence ids are cleared (the engine's and the chat
format's), so every generation runs to ``max_tokens`` -- a long generation whose first delta must
arrive long before its end.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer

USER = [{"role": "user", "content": "Write a long story about a lighthouse."}]


@pytest.fixture(scope="module")
def endless(tiny_model_dir: Path, chat_format: Any) -> Iterator[tuple[ProxyServer, Any]]:
    """A proxy over a tiny-model engine that never samples an end of turn."""
    from lego.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(
        tiny_model_dir, device="cpu", max_batch_size=4, seed=0, prefix_cache=False, max_model_len=4096
    )
    engine.eos_token_ids = []
    chat = copy.copy(chat_format)
    chat.eos_token_ids = []
    with ProxyServer(engine, chat, ProxyConfig(port=0, default_max_tokens=64)) as srv:
        yield srv, engine


def test_a_600_token_stream_sends_its_first_delta_within_10_percent_of_the_generation(
    endless: tuple[ProxyServer, Any],
) -> None:
    srv, _ = endless
    client = openai.OpenAI(base_url=f"{srv.root_url}/s/long/v1", api_key="k", max_retries=0)
    t0 = time.perf_counter()
    stream = client.chat.completions.create(
        model="m", messages=USER, max_tokens=600, stream=True, stream_options={"include_usage": True}
    )
    first: float | None = None
    text, deltas, usage = "", 0, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                first = first if first is not None else time.perf_counter() - t0
                text += choice.delta.content
                deltas += 1
    total = time.perf_counter() - t0
    assert usage is not None and usage.completion_tokens == 600
    assert first is not None and first / total < 0.10, f"first delta at {first:.2f}s of {total:.2f}s"
    print(f"600-token stream: first content delta at {first:.3f}s of {total:.3f}s ({first / total:.1%})")
    assert deltas > 100  # many deltas as tokens arrive, not one burst at the end
    # The streamed text is what was recorded: the exact sampled ids, decoded.
    seg = srv.trajectory("long").segments[0]
    sampled = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m]
    assert len(sampled) == 600 and text == srv.service.chat.decode(sampled).strip()


def test_anthropic_stream_arrives_in_many_text_deltas_with_pings_while_idle(
    endless: tuple[ProxyServer, Any],
) -> None:
    srv, _ = endless
    srv.service.ping_interval_s = 0.0005  # shorter than one decode step: every gap between tokens pings
    try:
        with (
            httpx.Client(timeout=60) as c,
            c.stream(
                "POST",
                f"{srv.root_url}/s/ping/v1/messages",
                json={"model": "m", "max_tokens": 40, "messages": USER, "stream": True},
            ) as r,
        ):
            raw = "".join(r.iter_text())
        assert r.status_code == 200 and "event: ping" in raw and "event: message_stop" in raw
        client = anthropic.Anthropic(base_url=f"{srv.root_url}/s/ping2", api_key="k", max_retries=0)
        with client.messages.stream(model="m", max_tokens=40, messages=USER) as stream:
            kinds = [e.type for e in stream]
            final = stream.get_final_message()
    finally:
        srv.service.ping_interval_s = 10.0
    assert kinds.count("content_block_delta") > 5 and final.usage.output_tokens == 40
    assert final.content[0].type == "text" and final.content[0].text


def test_responses_stream_deltas_concatenate_to_the_final_text(endless: tuple[ProxyServer, Any]) -> None:
    srv, _ = endless
    client = openai.OpenAI(base_url=f"{srv.root_url}/s/resp/v1", api_key="k", max_retries=0)
    events = list(client.responses.create(model="m", input="tell me a story", max_output_tokens=60, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done = next(e for e in events if e.type == "response.completed").response
    assert len(deltas) > 5 and "".join(deltas) == done.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_client_leaving_mid_stream_cancels_the_generation_and_records_nothing(
    endless: tuple[ProxyServer, Any],
) -> None:
    srv, engine = endless
    before = engine.stats["generated_tokens"]
    with (
        httpx.Client(timeout=60) as c,
        c.stream(
            "POST",
            f"{srv.root_url}/s/gone/v1/chat/completions",
            json={"model": "m", "max_tokens": 2000, "messages": USER, "stream": True},
        ) as r,
    ):
        assert r.status_code == 200
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # a first content delta: leave
    time.sleep(1.0)
    sampled = engine.stats["generated_tokens"] - before
    time.sleep(0.5)
    assert engine.stats["generated_tokens"] - before == sampled  # the row left the batch
    assert sampled < 2000
    assert srv.trajectory("gone").segments == []


def test_a_client_leaving_mid_stream_frees_the_engines_only_batch_slot(tiny_model_dir: Path, chat_format: Any) -> None:
    """One batch slot: a second request can only run once the first one's row has left the batch."""
    from lego.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(
        tiny_model_dir, device="cpu", max_batch_size=1, seed=0, prefix_cache=False, max_model_len=8192
    )
    engine.eos_token_ids = []
    chat = copy.copy(chat_format)
    chat.eos_token_ids = []
    with ProxyServer(engine, chat, ProxyConfig(port=0)) as srv:
        body = {"model": "m", "max_tokens": 6000, "messages": USER, "stream": True}
        with (
            httpx.Client(timeout=60) as c,
            c.stream("POST", f"{srv.root_url}/s/first/v1/chat/completions", json=body) as r,
        ):
            for line in r.iter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    break  # a first content delta: leave
        second = openai.OpenAI(base_url=f"{srv.root_url}/s/second/v1", api_key="k", max_retries=0)
        reply = second.chat.completions.create(model="m", messages=USER, max_tokens=8)
        assert reply.usage.completion_tokens == 8
        # the first request's row stopped long before its 6000 tokens: the second one got the slot
        assert engine.stats["generated_tokens"] < 3000
        assert srv.trajectory("first").segments == [] and len(srv.trajectory("second").segments) == 1
    asyncio.run(engine.close())


def test_an_error_mid_stream_ends_it_with_the_api_error_event(endless: tuple[ProxyServer, Any]) -> None:
    srv, _ = endless
    token = srv.open_session("sealed-mid")
    port = srv.listen_tcp("127.0.0.1")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/s/sealed-mid/v1", api_key=token, max_retries=0)
    stream = client.chat.completions.create(model="m", messages=USER, max_tokens=300, stream=True)
    with pytest.raises(openai.APIError, match="has ended"):
        for chunk in stream:
            if any(c.delta.content for c in chunk.choices):
                srv.service.seal_session("sealed-mid")  # the rollout ends the episode while it streams
    assert srv.trajectory("sealed-mid").segments == []


def test_an_error_before_the_first_token_keeps_its_status(endless: tuple[ProxyServer, Any]) -> None:
    srv, _ = endless
    client = openai.OpenAI(base_url=f"{srv.root_url}/s/big/v1", api_key="k", max_retries=0)
    huge = [{"role": "user", "content": "word " * 5000}]
    with pytest.raises(openai.BadRequestError) as info:
        list(client.chat.completions.create(model="m", messages=huge, stream=True))
    assert info.value.status_code == 400
