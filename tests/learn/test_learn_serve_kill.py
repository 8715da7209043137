"""A real `lego serve` process, SIGKILLed while a harness is mid-session: no acknowledged turn is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

from lego.learn.server import ControlClient
from lego.learn.store import SqliteStore


def _wait_for_server(directory: Path, proc: subprocess.Popen[bytes], timeout: float = 180.0) -> ControlClient:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"lego serve exited with {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        if (directory / "serve.json").exists():
            try:
                return ControlClient.connect(directory)
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError("lego serve did not start")


def test_sigkill_mid_session_loses_no_acknowledged_turn(tiny_model_dir: Path, tmp_path: Path) -> None:
    directory = tmp_path / "serve"
    cmd = [
        sys.executable,
        "-m",
        "lego.conductor.cli.main",
        "serve",
        "--dir",
        str(directory),
        "--model",
        str(tiny_model_dir),
        "--device",
        "cpu",
        "--port",
        "0",
        "-o",
        "proxy.default_max_tokens=6",
        "-o",
        "engine.num_threads=1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        client = _wait_for_server(directory, proc)
        opened = client.new_session(private=False, label="killed")
        client.close()
        oa = openai.OpenAI(base_url=f"{opened.model_url}/v1", api_key=opened.key, max_retries=0, timeout=30)
        acknowledged: list[int] = []
        stop = threading.Event()

        def harness() -> None:  # a harness that keeps asking until the server dies under it
            i = 0
            while not stop.is_set():
                try:
                    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {i}"}])
                except openai.APIError:
                    return
                acknowledged.append(i)
                i += 1

        worker = threading.Thread(target=harness)
        worker.start()
        deadline = time.monotonic() + 120
        while len(acknowledged) < 8 and time.monotonic() < deadline and worker.is_alive():
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)  # mid-session: the harness has a request in flight or about to be
        proc.wait(timeout=30)
        stop.set()
        worker.join(timeout=60)
        assert len(acknowledged) >= 8
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    store = SqliteStore(directory / "learn.db")  # reopened: WAL recovery of whatever the kill left
    turns = list(store.iter_turns(session_id=opened.row.id))
    contents = [t.messages[-1]["content"] for t in turns]
    # Every acknowledged turn is there, in order; at most the one in flight beyond them (committed,
    # its reply not yet received when the process died).
    assert contents[: len(acknowledged)] == [f"turn {i}" for i in acknowledged]
    assert len(acknowledged) <= len(turns) <= len(acknowledged) + 1
    assert all(t.tokens is not None for t in turns)
