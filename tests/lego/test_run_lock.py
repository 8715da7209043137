"""Issue 45: one process a run directory. A second `lego train --resume` into a directory another
process holds is refused at once (exit 2, the holder's pid named, nothing loaded); a SIGKILLed
holder's lock is released by the kernel. Through the real CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

HOLD = "from lego.io import DirLock; import sys, time; lock = DirLock(sys.argv[1], 'test'); print('held', flush=True); time.sleep(120)"


def _lego(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lego", *args], capture_output=True, text=True, timeout=120)


def test_a_held_run_directory_is_refused_and_a_killed_holders_lock_is_freed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = _lego("train", "--resume", "-o", f"training.out_dir={run}")
        assert refused.returncode == 2, refused.stderr
        assert f"pid {holder.pid}" in refused.stderr and "in use" in refused.stderr
        assert (run / ".lock").read_text().strip() == str(holder.pid)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    after = _lego("train", "--resume", "-o", f"training.out_dir={run}")
    assert after.returncode == 2 and "holds no run to continue" in after.stderr, after.stderr
