"""Real harnesses read streams that open and ping before their first token.

The oracle engine (as in ``tests/harnesses/test_e2e_oracle.py``) behind ``SlowPrefill``: every reply
starts ``DELAY`` seconds late, the proxy pings every ``PING`` seconds, so each streamed call the
harness makes opens with the API's opening events (Gemini: its empty-text keep-alive chunk) and
several keep-alives before any text. Each harness must still finish and apply the gold patch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig
from lego.harnesses.base import get_harness
from lego.harnesses.install import installed
from lego.proxies.server import ProxyServer
from lego.types import HarnessLimits, Task
from tests.harnesses.rollout_helpers import run_one
from tests.lego.calc_task import make_calc_task
from tests.proxies.conftest import SlowPrefill

pytestmark = pytest.mark.harness

DELAY = 1.5
PING = 0.2
STREAMING = ["claude-code", "codex", "gemini-cli", "opencode", "qwen-code", "aider"]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_calc_task(tmp_path_factory.mktemp("calc-repo"), instance_id="calc__add-1")


@pytest.fixture(scope="module")
def slow_oracle(tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lego.engines.oracle import OracleEngine
    from lego.engines.transformers_engine import TransformersEngine

    scorer = TransformersEngine(tiny_model_dir)
    engine = SlowPrefill(OracleEngine(chat_format, scorer), DELAY)
    sock = tmp_path_factory.mktemp("proxy") / "proxy.sock"
    server = ProxyServer(engine, chat_format, ProxyConfig(uds=str(sock), default_max_tokens=4096))  # type: ignore[arg-type]
    server.start()
    server.service.ping_interval_s = PING
    yield server
    server.stop()
    asyncio.run(scorer.close())


@pytest.mark.parametrize("name", STREAMING)
def test_a_harness_reads_a_stream_that_pinged_before_its_first_token(name: str, task: Task, slow_oracle: Any) -> None:
    if installed(name) is None:
        pytest.skip(f"{name} is not installed; run `lego harness install {name}`")
    out = run_one(get_harness(name), task, slow_oracle, HarnessLimits(max_turns=10, timeout_s=300))
    result, graded = out["result"], out["grade"]
    detail = f"{result.reason} exit={result.exit_code}\n{result.logs[-3000:]}\n{graded.log[-1500:]}"
    assert result.reason == "completed" and graded.reward == 1.0, detail
    traj = out["trajectory"]
    assert traj.counters["calls"] >= 2  # at least one tool call and the answer after it
    assert not traj.discarded, "the harness retried a call: it did not accept a stream"
