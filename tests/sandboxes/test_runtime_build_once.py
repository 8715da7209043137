"""Issue 45: the task runtime is built once however many sandboxes start first at once (the first
`lego train` starts a step's sandboxes together; each used to build its own copy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import threading
from lego.sandboxes import runtime

builds = []
real = runtime._build


def counted(*args, **kwargs):
    builds.append(1)
    return real(*args, **kwargs)


runtime._build = counted
found = []
threads = [threading.Thread(target=lambda: found.append(runtime.python_runtime().python)) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(builds), len(set(found)), all(p.exists() for p in found))
"""


def test_eight_first_sandboxes_build_the_runtime_once(tmp_path: Path) -> None:
    env = {**os.environ, "LEGO_DATA_DIR": str(tmp_path / "data")}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1", "1", "True"], run.stdout
