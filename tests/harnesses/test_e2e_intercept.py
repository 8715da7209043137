"""Interception mode end to end: a harness with its base-URL setting removed calls its provider's
real host; mitmdump in the sandbox routes it to the proxy session; the oracle's patch lands and
grades reward 1. Needs `lego harness install mitmproxy` and the harness itself."""

from __future__ import annotations

import math
from typing import Any

import pytest
from rollout_helpers import run_one

from harnesses.codex import CodexHarness
from harnesses.install import installed
from harnesses.intercept import ADDON, PROVIDER_HOSTS, Interceptor
from lego.types import Endpoint, HarnessLimits, Task

pytestmark = pytest.mark.harness


def test_interceptor_environment_names_the_proxy_and_the_ca() -> None:
    icpt = Interceptor(port=1234)
    icpt.ca_path = "/home/agent/.mitmproxy/mitmproxy-ca-cert.pem"
    env = icpt.environment()
    assert env["HTTPS_PROXY"] == "http://127.0.0.1:1234" and "127.0.0.1" in env["NO_PROXY"]
    assert {env[k] for k in ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")} == {icpt.ca_path}
    assert "api.openai.com" in PROVIDER_HOSTS and "LEGO_INTERCEPT_TARGET" in ADDON


def test_codex_without_a_base_url_is_routed_to_the_session(task: Task, proxy: Any) -> None:
    for name in ("codex", "mitmproxy"):
        if installed(name) is None:
            pytest.skip(f"{name} is not installed; run `lego harness install {name}`")
    harness = CodexHarness(intercept=True)
    out = run_one(harness, task, proxy, HarnessLimits(max_turns=10, timeout_s=300))
    result, graded, traj = out["result"], out["grade"], out["trajectory"]
    assert "base_url" not in harness.config_toml(Endpoint(base_url="http://x/v1", anthropic_base_url="http://x"))
    assert result.reason == "completed", result.logs[-3000:]
    assert graded.reward == 1.0, graded.log[-2000:]
    sampled = [lp for s in traj.segments for lp, m in zip(s.response_logprobs, s.response_mask, strict=True) if m]
    assert sampled and all(lp is not None and math.isfinite(lp) for lp in sampled)
