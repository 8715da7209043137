"""Issue 45: lego leaves no temporary directory behind: `lego proxy` removes its own on SIGTERM, and
one a SIGKILLed process left is swept by the next process that makes one (through real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

MAKE = "from lego.paths import owned_tmpdir; import time; print(owned_tmpdir('lego-hygiene-'), flush=True); time.sleep(120)"


def test_a_killed_owners_directory_is_swept_by_the_next_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", MAKE], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    left = Path(child.stdout.readline().strip())
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert left.is_dir()  # a SIGKILL runs nothing
    from lego.paths import owned_tmpdir

    mine = owned_tmpdir("lego-hygiene-")
    assert not left.exists() and mine.is_dir()


def _owned_by(pid: int) -> list[Path]:
    out = []
    for d in Path(tempfile.gettempdir()).glob("lego-*"):
        try:
            if (d / ".owner").read_text().strip() == str(pid):
                out.append(d)
        except OSError:
            continue
    return out


def test_lego_proxy_removes_its_temporary_directories_on_sigterm(tiny_model_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lego", "proxy", "--port", "0", "--model", str(tiny_model_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Ctrl-C to stop" in line:
                break
        assert _owned_by(proc.pid), "the proxy made no temporary directory of its own"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _owned_by(proc.pid) == []
