"""Shared real components of the harness tests: a small task repo with a hidden test, and the
recording proxy (Unix socket) in front of the oracle engine, whose logprobs come from the tiny model.

The oracle answers each call ``PREFILL_DELAY_S`` late while the proxy pings every ``PING_S``: every
streamed call a harness makes opens with the API's opening events and keep-alives (Gemini: its
empty-text chunk) before any text, as a long prompt's prefill looks to it; so each harness's
end-to-end test also proves it reads such streams (tests/proxies/test_first_byte.py times the bytes)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig
from lego.engines.oracle import OracleEngine
from lego.engines.transformers_engine import TransformersEngine
from lego.types import Task
from tests.lego.calc_task import make_calc_task
from tests.proxies.slow_prefill import SlowPrefill

PREFILL_DELAY_S = 0.5
PING_S = 0.1


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """A small buggy repo at its base commit, the gold patch and a hidden failing test."""
    return make_calc_task(tmp_path_factory.mktemp("calc-repo"), instance_id="calc__add-1")


@pytest.fixture(scope="module")
def proxy(tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lego.proxies.server import ProxyServer

    scorer = TransformersEngine(tiny_model_dir)
    engine = SlowPrefill(OracleEngine(chat_format, scorer), PREFILL_DELAY_S)
    sock = tmp_path_factory.mktemp("proxy") / "proxy.sock"
    server = ProxyServer(engine, chat_format, ProxyConfig(uds=str(sock), default_max_tokens=4096))  # type: ignore[arg-type]
    server.start()
    server.service.ping_interval_s = PING_S
    yield server
    server.stop()
    asyncio.run(scorer.close())
