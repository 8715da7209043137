"""Each real harness end to end with the oracle engine: harness process in a local bubblewrap
sandbox -> recording proxy (Unix socket) -> oracle (gold patch; logprobs from the tiny model) ->
the harness applies the patch with its own tools -> the hidden tests grade it.

Acceptance per harness: it ends ``completed``, the task grades reward 1, the recorded trajectory
has at least one segment with mask-1 tokens whose logprobs are real numbers, and no call was
retried, although every stream opened and pinged before its first token (see conftest.py).
Third-party harnesses must be installed first (``lego harness install NAME``); those that are not
are skipped with that instruction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from rollout_helpers import run_one

from lego.config import SandboxConfig
from lego.harnesses.base import get_harness
from lego.harnesses.install import installed
from lego.types import Endpoint, HarnessLimits, Task

pytestmark = pytest.mark.harness

# openhands installs in over two minutes (pip resolves ~150 packages), so it runs with -m slow_harness.
HARNESS_NAMES = [
    "lego-agent",
    "mini-swe-agent",
    "aider",
    pytest.param("openhands", marks=pytest.mark.slow_harness),
    "opencode",
    "claude-code",
    "codex",
    "qwen-code",
    "gemini-cli",
]


@pytest.mark.parametrize("name", HARNESS_NAMES)
def test_oracle_rollout_grades_reward_1(name: str, task: Task, proxy: Any) -> None:
    if name != "lego-agent" and installed(name) is None:
        pytest.skip(f"{name} is not installed; run `lego harness install {name}`")
    out = run_one(get_harness(name), task, proxy, HarnessLimits(max_turns=10, timeout_s=300))
    result, graded, traj = out["result"], out["grade"], out["trajectory"]
    detail = f"{result.reason} exit={result.exit_code}\n{result.logs[-3000:]}\n{graded.log[-1500:]}"
    assert result.reason == "completed", detail
    assert graded.reward == 1.0, detail
    sampled = [s for s in traj.segments if s.num_sampled > 0]
    assert sampled, f"no segment with sampled tokens: {traj.counters}"
    logprobs = [lp for s in sampled for lp, m in zip(s.response_logprobs, s.response_mask, strict=True) if m == 1]
    assert logprobs and all(lp is not None and math.isfinite(lp) and lp <= 0 for lp in logprobs)
    assert not traj.discarded, "the harness retried a call: it did not accept a stream that pinged first"
    assert out["version"]


def test_a_crashing_harness_is_a_harness_error_and_the_next_rollout_is_unaffected(task: Task, proxy: Any) -> None:
    from lego.sandboxes.local import LocalSandbox

    harness = get_harness("lego-agent")
    sandbox = LocalSandbox(task, SandboxConfig(), proxy_uds=Path(proxy.uds))
    try:
        wrong = f"http://127.0.0.1:{sandbox.proxy_port}/no/such/route/v1"
        endpoint = Endpoint(base_url=wrong, anthropic_base_url=wrong)
        prepared = harness.prepare(sandbox, endpoint)
        result = harness.run(task, sandbox, prepared, HarnessLimits(max_turns=3, timeout_s=120))
    finally:
        sandbox.close()
    assert result.reason == "harness_error" and result.exit_code == 1
    assert "HTTP 404" in result.logs
    again = run_one(get_harness("lego-agent"), task, proxy, HarnessLimits(max_turns=10, timeout_s=300))
    assert again["result"].reason == "completed" and again["grade"].reward == 1.0


def test_a_hanging_harness_times_out(task: Task, proxy: Any) -> None:
    if installed("mini-swe-agent") is None:
        pytest.skip("mini-swe-agent is not installed; run `lego harness install mini-swe-agent`")
    out = run_one(get_harness("mini-swe-agent"), task, proxy, HarnessLimits(max_turns=10, timeout_s=1))
    assert out["result"].reason == "timeout" and out["result"].exit_code is None
