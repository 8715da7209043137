"""`lego proxy` as a user runs it: a real subprocess that prints its URLs, serves, and stops on Ctrl-C or SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest


def _as_background_job() -> None:
    """What a non-interactive shell does to `cmd &`: SIGINT ignored, inherited through exec."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "sig, preexec, from_config",
    [(signal.SIGINT, None, False), (signal.SIGINT, _as_background_job, False), (signal.SIGTERM, None, True)],
    ids=["ctrl-c", "ctrl-c-inherited-ignore", "sigterm-config-file"],
)
def test_lego_proxy_prints_urls_serves_and_stops_on_signal(
    tiny_model_dir: Path, tmp_path: Path, sig: signal.Signals, preexec: Callable[[], None] | None, from_config: bool
) -> None:
    cmd = [sys.executable, "-m", "lego.conductor.cli.main", "proxy", "--model-port", "0"]
    if from_config:  # the same settings as one config file and -o, like every lego command
        cfg = tmp_path / "proxy.toml"
        cfg.write_text(
            f'[engine]\nmodel = "{tiny_model_dir}"\ndevice = "cpu"\n\n[proxy]\nserved_model_name = "from-file"\n'
        )
        cmd += [str(cfg), "-o", "proxy.port=0"]
    else:
        cmd += ["--model", str(tiny_model_dir), "--port", "0", "--device", "cpu"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec)
    try:
        urls: dict[str, str] = {}
        deadline = time.monotonic() + 120
        while len(urls) < 3 and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line and proc.poll() is not None:
                break
            for key in ("OpenAI", "Anthropic", "model"):
                m = re.search(rf"{key} base URL:\s+(\S+)", line)
                if m:
                    urls[key] = m.group(1)
        assert urls["OpenAI"].endswith("/v1") and urls["OpenAI"] == urls["Anthropic"] + "/v1"
        r = httpx.post(
            f"{urls['Anthropic']}/v1/messages",
            json={"model": "claude-x", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200 and r.json()["usage"]["output_tokens"] >= 1
        served = httpx.get(f"{urls['OpenAI']}/models").json()["data"][0]["id"]
        assert served == ("from-file" if from_config else "lego-policy")
        # an agent's way in: a session opened on the control face, its token on the model face
        root = urls["Anthropic"]
        token = httpx.post(f"{root}/s/job", json={"max_turns": 3}).json()["token"]
        chat = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
        model_url = urls["model"].replace("<session>", "job") + "/chat/completions"
        assert httpx.post(model_url, json=chat).status_code == 401
        assert httpx.post(model_url, json=chat, headers={"authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(f"{root}/s/job/trajectory").json()["counters"]["calls"] == 1
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0  # a liveness bound, not a speed target
    finally:
        if proc.poll() is None:
            proc.kill()


def test_lego_proxy_refuses_a_non_loopback_bind_without_an_api_key(tiny_model_dir: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "lego.conductor.cli.main",
        "proxy",
        "--model",
        str(tiny_model_dir),
        "--host",
        "0.0.0.0",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--api-key" in done.stderr
