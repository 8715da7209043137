"""Fixtures for the proxy tests: the real tiny model served by a real in-process proxy.

The test double is the shipped :class:`lego.engines.scripted.ScriptedEngine`: it plays chosen
completions (so a conversation can use tools deterministically, which a randomly initialised model
never would) and takes each token's logprob from the real model by teacher forcing, so every recorded
logprob is still real. ``streaming`` serves it with ``stream=True``: its ids reach ``on_tokens`` one at
a time, as a sampling engine hands them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig
from lego.engines.scripted import ScriptedEngine
from lego.proxies.server import ProxyServer


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
    with ProxyServer(engine, chat_format, config) as srv:
        yield srv, engine


@pytest.fixture()
def streaming(tiny_engine: Any, chat_format: Any) -> Iterator[tuple[ProxyServer, ScriptedEngine]]:
    """A proxy serving scripted completions token by token (its stream path runs as with a real engine)."""
    engine = ScriptedEngine(tiny_engine, chat_format, stream=True)
    with ProxyServer(engine, chat_format, ProxyConfig(port=0, default_max_tokens=256)) as srv:
        yield srv, engine
