"""Harnesses driven by the real tiny policy (TransformersEngine) instead of the oracle: the harness
runs until its turn or time limit, the proxy stays up, and what the policy sampled is recorded
with real logprobs. Reward 0 is expected (the tiny model is untrained)."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig, SandboxConfig
from lego.engines.transformers_engine import TransformersEngine
from lego.harnesses.base import get_harness
from lego.harnesses.install import installed
from lego.harnesses.lego_agent_adapter import LegoAgentHarness
from lego.harnesses.opencode import OpenCodeHarness
from lego.seams import Harness
from lego.types import Endpoint, HarnessLimits, SamplingOverride, SessionSpec, Task

pytestmark = pytest.mark.harness

TASK_FILES = {"calc.py": "def add(a, b):\n    return a - b\n"}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    repo = tmp_path_factory.mktemp("policy-repo")
    (repo / "calc.py").write_text(TASK_FILES["calc.py"])
    return Task(
        instance_id="calc-policy",
        repo="local/calc",
        problem_statement="add() subtracts; fix it.",
        patch="",
        repo_path=str(repo),
    )


@pytest.fixture(scope="module")
def proxy(tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lego.proxies.server import ProxyServer

    engine = TransformersEngine(tiny_model_dir, seed=0)
    sock = tmp_path_factory.mktemp("policy-proxy") / "proxy.sock"
    server = ProxyServer(engine, chat_format, ProxyConfig(uds=str(sock), default_max_tokens=48))
    server.start()
    yield server
    server.stop()
    asyncio.run(engine.close())


def rollout(harness: Harness, task: Task, proxy: Any, limits: HarnessLimits) -> tuple[Any, Any]:
    from lego.sandboxes.local import LocalSandbox

    sid = f"{harness.name}-{uuid.uuid4().hex[:8]}"
    proxy.open_session(sid, SessionSpec(sampling_override=SamplingOverride(temperature=1.0)))
    binds = harness.ro_binds() if hasattr(harness, "ro_binds") else []
    memory_mb = max(SandboxConfig().memory_mb, getattr(harness, "min_memory_mb", 0))
    sandbox = LocalSandbox(task, SandboxConfig(memory_mb=memory_mb), proxy_uds=Path(proxy.uds), ro_binds=binds)
    try:
        root = f"http://127.0.0.1:{sandbox.proxy_port}/s/{sid}"
        endpoint = Endpoint(base_url=f"{root}/v1", anthropic_base_url=root, session_id=sid)
        result = harness.run(task, sandbox, harness.prepare(sandbox, endpoint), limits)
    finally:
        sandbox.close()
    return result, proxy.trajectory(sid)


def assert_recorded(traj: Any) -> None:
    sampled = [lp for s in traj.segments for lp, m in zip(s.response_logprobs, s.response_mask, strict=True) if m]
    assert sampled and all(lp is not None and math.isfinite(lp) for lp in sampled)


def test_lego_agent_runs_to_its_turn_limit(task: Task, proxy: Any) -> None:
    result, traj = rollout(LegoAgentHarness(max_tokens=48), task, proxy, HarnessLimits(max_turns=3, timeout_s=300))
    assert result.reason in ("max_turns", "completed"), result.logs
    assert 1 <= result.turns <= 3 and traj.counters["calls"] == result.turns
    assert_recorded(traj)


def make(name: str) -> Harness:
    """The adapter, with OpenCode's completion budget cut so the tiny model's turns stay short."""
    return OpenCodeHarness(max_output_tokens=48) if name == "opencode" else get_harness(name)


@pytest.mark.parametrize("name", ["mini-swe-agent", pytest.param("opencode", marks=pytest.mark.slow), "codex"])
def test_third_party_harness_runs_to_a_limit_and_the_proxy_stays_up(name: str, task: Task, proxy: Any) -> None:
    if installed(name) is None:
        pytest.skip(f"{name} is not installed; run `lego harness install {name}`")
    result, traj = rollout(make(name), task, proxy, HarnessLimits(max_turns=2, timeout_s=90))
    assert result.reason in ("max_turns", "completed", "timeout"), result.logs
    assert_recorded(traj)
    after, traj2 = rollout(LegoAgentHarness(max_tokens=16), task, proxy, HarnessLimits(max_turns=1, timeout_s=120))
    assert after.reason in ("max_turns", "completed") and traj2.counters["calls"] == 1
