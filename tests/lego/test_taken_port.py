"""Issue 45: `lego proxy` and `lego serve` refuse a taken port at once, naming the flag, before any
model loads (they used to load for 40-66 s first, and serve then printed an asyncio traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize("command", [["proxy"], ["serve", "--dir", "{tmp}"]], ids=["proxy", "serve"])
def test_a_taken_port_is_refused_before_the_model_loads(tmp_path: Path, command: list[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = [a.replace("{tmp}", str(tmp_path / "serve")) for a in command]
        t0 = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "lego", *args, "--port", str(port)], capture_output=True, text=True, timeout=120
        )
        took = time.monotonic() - t0
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"port {port}" in run.stderr and "--port" in run.stderr and "Traceback" not in run.stderr
    assert took < 30, f"refused after {took:.0f}s"
