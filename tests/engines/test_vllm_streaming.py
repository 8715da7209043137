# mypy: disable-error-code="union-attr,arg-type,attr-defined,index"
"""VLLMEngine streams: ``stream: true`` against the stand-in `vllm serve` (a real tiny-model engine
behind vLLM's SSE shape), directly and through the real proxy read with the OpenAI SDK.

The stand-in's engine and the chat format have their end-of-sequence ids cleared, so every
generation runs to ``max_tokens`` and a stream has many chunks."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from lego.config import ProxyConfig
from lego.engines.vllm import VLLMEngine
from lego.proxies.server import ProxyServer
from lego.types import SamplingParams
from tests.engines.vllm_standin import VLLMStandIn

USER = [{"role": "user", "content": "Write a long story about a lighthouse."}]


@pytest.fixture(scope="module")
def standin(tiny_model_dir: Path) -> Iterator[VLLMStandIn]:
    with VLLMStandIn(tiny_model_dir) as server:
        server.engine.eos_token_ids = []
        yield server


def test_streamed_runs_join_to_the_non_stream_generation_for_the_same_seed(standin: VLLMStandIn) -> None:
    engine = VLLMEngine(standin.url)
    sampling = SamplingParams(max_tokens=24, temperature=1.0, seed=11)
    runs: list[list[int]] = []

    async def go() -> tuple[Any, Any]:
        try:
            streamed = await engine.generate([1, 2, 3], sampling, on_tokens=runs.append)
            whole = await engine.generate([1, 2, 3], sampling)
            return streamed, whole
        finally:
            await engine.close()

    streamed, whole = asyncio.run(go())
    assert len(runs) > 5 and [t for r in runs for t in r] == streamed.token_ids
    assert streamed.token_ids == whole.token_ids and len(streamed.token_ids) == 24
    assert streamed.logprobs == whole.logprobs and streamed.finish_reason == whole.finish_reason == "length"


def test_a_proxy_over_vllm_streams_deltas_and_records_what_the_non_stream_path_records(
    standin: VLLMStandIn, chat_format: Any
) -> None:
    chat = copy.copy(chat_format)
    chat.eos_token_ids = []
    engine = VLLMEngine(standin.url)
    with ProxyServer(engine, chat, ProxyConfig(port=0, default_max_tokens=64)) as srv:
        client = openai.OpenAI(base_url=f"{srv.root_url}/s/streamed/v1", api_key="k", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=USER, max_tokens=40, seed=5, stream=True, stream_options={"include_usage": True}
        )
        deltas: list[str] = []
        usage = None
        for chunk in stream:
            usage = chunk.usage or usage
            deltas += [c.delta.content for c in chunk.choices if c.delta.content]
        whole = openai.OpenAI(base_url=f"{srv.root_url}/s/whole/v1", api_key="k", max_retries=0)
        reply = whole.chat.completions.create(model="m", messages=USER, max_tokens=40, seed=5)
        streamed_seg = srv.trajectory("streamed").segments[0]
        whole_seg = srv.trajectory("whole").segments[0]
    assert len(deltas) > 5 and usage is not None and usage.completion_tokens == 40
    sampled = [t for t, m in zip(streamed_seg.response_ids, streamed_seg.response_mask, strict=True) if m]
    assert len(sampled) == 40 and "".join(deltas) == srv.service.chat.decode(sampled).strip()
    assert "".join(deltas) == reply.choices[0].message.content
    assert streamed_seg.response_ids == whole_seg.response_ids
    assert streamed_seg.response_logprobs == whole_seg.response_logprobs


def test_cancelling_a_stream_closes_it_and_the_server_stops_generating(standin: VLLMStandIn) -> None:
    engine = VLLMEngine(standin.url)

    before = standin.engine.stats["generated_tokens"]

    async def go() -> tuple[int, int]:
        first = asyncio.Event()
        task = asyncio.create_task(
            engine.generate([1, 2, 3], SamplingParams(max_tokens=2000), on_tokens=lambda ids: first.set())
        )
        await asyncio.wait_for(first.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(1.0)  # the stand-in sees the disconnect and the engine drops the row
        settled = standin.engine.stats["generated_tokens"]
        await asyncio.sleep(0.5)
        await engine.close()
        return settled, standin.engine.stats["generated_tokens"]

    settled, later = asyncio.run(go())
    assert later == settled < before + 2000  # stopped, not run to max_tokens
