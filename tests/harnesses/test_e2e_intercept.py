"""Interception mode end to end: a harness with its base-URL setting removed calls its provider's
real host; mitmdump in the sandbox routes it to the proxy session; the oracle's patch lands and
grades reward 1. Needs `lego harness install mitmproxy` and the harness itself."""

from __future__ import annotations

import math
from typing import Any

import pytest
from rollout_helpers import run_one

from lego.harnesses.claude_code import ClaudeCodeHarness
from lego.harnesses.codex import CodexHarness
from lego.harnesses.install import installed
from lego.harnesses.intercept import ADDON, PROVIDER_HOSTS, Interceptor
from lego.types import Endpoint, HarnessLimits, Task

pytestmark = pytest.mark.harness


def test_interceptor_environment_names_the_proxy_and_the_ca() -> None:
    ca_path = "/home/agent/.mitmproxy/mitmproxy-ca-cert.pem"
    env = Interceptor(port=1234).environment(ca_path)
    assert env["HTTPS_PROXY"] == "http://127.0.0.1:1234" and "127.0.0.1" in env["NO_PROXY"]
    assert {env[k] for k in ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")} == {ca_path}
    assert "api.openai.com" in PROVIDER_HOSTS and "LEGO_INTERCEPT_TARGET" in ADDON


@pytest.mark.parametrize("name", ["codex", "claude-code"])
def test_a_harness_without_its_base_url_is_routed_to_the_session(name: str, task: Task, proxy: Any) -> None:
    for needed in (name, "mitmproxy"):
        if installed(needed) is None:
            pytest.skip(f"{needed} is not installed; run `lego harness install {needed}`")
    harness: CodexHarness | ClaudeCodeHarness
    if name == "codex":
        harness = CodexHarness(intercept=True)
        assert "base_url" not in harness.config_toml(Endpoint(base_url="http://x/v1", anthropic_base_url="http://x"))
    else:
        harness = ClaudeCodeHarness(intercept=True)
        assert "ANTHROPIC_BASE_URL" not in harness.environment(
            Endpoint(base_url="http://x/v1", anthropic_base_url="http://x"), "/h"
        )
    out = run_one(harness, task, proxy, HarnessLimits(max_turns=10, timeout_s=300))
    result, graded, traj = out["result"], out["grade"], out["trajectory"]
    assert result.reason == "completed", result.logs[-3000:]
    assert graded.reward == 1.0, graded.log[-2000:]
    sampled = [lp for s in traj.segments for lp, m in zip(s.response_logprobs, s.response_mask, strict=True) if m]
    assert sampled and all(lp is not None and math.isfinite(lp) for lp in sampled)
