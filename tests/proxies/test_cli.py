"""`lego proxy` as a user runs it: a real subprocess that prints its URLs, serves, and stops on Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def test_lego_proxy_prints_urls_serves_and_stops_on_ctrl_c(tiny_model_dir: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "lego.cli.main",
        "proxy",
        "--model",
        str(tiny_model_dir),
        "--port",
        "0",
        "--device",
        "cpu",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        urls: dict[str, str] = {}
        deadline = time.monotonic() + 120
        while len(urls) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line and proc.poll() is not None:
                break
            for key in ("OpenAI", "Anthropic"):
                m = re.search(rf"{key} base URL:\s+(\S+)", line)
                if m:
                    urls[key] = m.group(1)
        assert urls["OpenAI"].endswith("/v1") and urls["OpenAI"] == urls["Anthropic"] + "/v1"
        r = httpx.post(
            f"{urls['Anthropic']}/v1/messages",
            json={"model": "claude-x", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200 and r.json()["usage"]["output_tokens"] >= 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0  # a liveness bound: a starved CI box once took > 20 s to stop
    finally:
        if proc.poll() is None:
            proc.kill()
