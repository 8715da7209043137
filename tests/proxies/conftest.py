"""Fixtures for the proxy tests: the real tiny model served by a real in-process proxy.

``ScriptedEngine`` is the one test double: it plays chosen completions (so a conversation can use
tools deterministically, which a randomly initialised model never would) and takes each token's
logprob from the real model by teacher forcing, so every recorded logprob is still real.
``StreamingScript`` is the same, handing its ids to ``on_tokens`` one at a time as a real engine does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig
from lego.proxies.server import ProxyServer
from lego.types import Generation, RequestContext, SamplingParams


class ScriptedEngine:
    """Replays scripted completions (text rendered to ids) with logprobs scored by a real engine."""

    takes_answer = False

    def __init__(self, real: Any, chat_format: Any) -> None:
        self.real = real
        self.chat = chat_format
        self.script: list[str] = []
        self.prompts: list[list[int]] = []
        self.policy_version = 0
        self.max_model_len = real.max_model_len
        self.delay = 0.0  # seconds each generation waits first (to test cancellation)

    def push(self, *texts: str) -> None:
        self.script.extend(texts)

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        if self.delay:
            await asyncio.sleep(self.delay)
        text = self.script.pop(0) if self.script else "ok<|im_end|>"
        ids = self.chat.encode(text)[: sampling.max_tokens]
        (lps,) = await self.real.score([list(prompt_ids) + ids], [len(prompt_ids)], sampling.temperature or 1.0)
        self.prompts.append(list(prompt_ids))
        finish = "stop" if ids and ids[-1] in self.chat.eos_token_ids else "length"
        return Generation(
            token_ids=ids,
            logprobs=lps,
            finish_reason=finish,
            policy_version=self.policy_version,
            prompt_tokens=len(prompt_ids),
        )

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return list(await self.real.score(sequences, prompt_lens, temperature))

    def load_weights(self, state_dict: Any) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class StreamingScript(ScriptedEngine):
    """The scripted engine, streaming its ids one by one (so the proxy's stream path runs)."""

    async def generate(  # type: ignore[override]
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: Any = None,
    ) -> Generation:
        gen = await super().generate(prompt_ids, sampling, context)
        for tok in gen.token_ids:
            if on_tokens is not None:
                on_tokens([tok])
        return gen


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir: Path) -> Any:
    from lego.engines.transformers_engine import TransformersEngine

    return TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=8, seed=0)


@pytest.fixture()
def server(tiny_engine: Any, chat_format: Any) -> Iterator[ProxyServer]:
    """A proxy on a free loopback port serving the tiny model."""
    with ProxyServer(tiny_engine, chat_format, ProxyConfig(port=0, default_max_tokens=24)) as srv:
        yield srv


@pytest.fixture()
def scripted(tiny_engine: Any, chat_format: Any) -> Iterator[tuple[ProxyServer, ScriptedEngine]]:
    """A proxy serving scripted completions (real logprobs) for tool-using conversations."""
    engine = ScriptedEngine(tiny_engine, chat_format)
    # keep: the scripted turns think and the clients here drop reasoning_content; these tests are
    # about splicing sampled ids, so reasoning stays in context (template policy: tests/families).
    config = ProxyConfig(port=0, default_max_tokens=256, reasoning_history="keep")
    with ProxyServer(engine, chat_format, config) as srv:  # type: ignore[arg-type]
        yield srv, engine


@pytest.fixture()
def streaming(tiny_engine: Any, chat_format: Any) -> Iterator[tuple[ProxyServer, StreamingScript]]:
    """A proxy serving scripted completions token by token (its stream path runs as with a real engine)."""
    engine = StreamingScript(tiny_engine, chat_format)
    with ProxyServer(engine, chat_format, ProxyConfig(port=0, default_max_tokens=256)) as srv:  # type: ignore[arg-type]
        yield srv, engine
