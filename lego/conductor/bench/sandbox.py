"""`lego bench sandbox`: local sandbox create-to-ready and grade latency, p50 / p95.

Targets (issue 4): create-to-ready <= 300 ms; grade <= the tests' own run time + 500 ms.
Baselines measured in the same run, so the figures compare across machines:

* ``copy_spawn_s``: copy the same pristine repo and spawn one process, with no isolation: the
  floor any sandbox pays;
* ``tests_s``: the graded tests' own run time: plain pytest (same interpreter, same flags, same
  test ids) in an unsandboxed copy with the gold patch and hidden tests applied.

"Ready" means the bubblewrap init runs and, since a proxy socket is given, the in-sandbox socat
forwarder listens; ``first_exec_s`` is the first command after that.
"""

from __future__ import annotations

import http.server
import json
import shlex
import shutil
import socketserver
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import click

from lego.config import SandboxConfig
from lego.errors import TaskError
from lego.io import atomic_write_json
from lego.types import Task

__all__ = ["command", "run_bench"]

_LIB = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
_VISIBLE = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
_HIDDEN = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(repo), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _demo_task(root: Path) -> Task:
    """A tiny one-commit repo (used when the built-in suite is not built)."""
    repo = root / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text(_LIB)
    (repo / "tests" / "test_visible.py").write_text(_VISIBLE)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    patches = []
    for path, text in (("calc/__init__.py", _LIB.replace("a - b", "a + b")), ("tests/test_hidden.py", _HIDDEN)):
        old = (repo / path).read_text() if (repo / path).exists() else None
        (repo / path).write_text(text)
        _git(repo, "add", "-A")
        patches.append(_git(repo, "diff", "--cached"))
        _git(repo, "reset", "-q")
        (repo / path).write_text(old) if old is not None else (repo / path).unlink()
    return Task(
        instance_id="bench-calc",
        repo="lego/bench-calc",
        problem_statement="add is wrong",
        patch=patches[0],
        test_patch=patches[1],
        FAIL_TO_PASS=["tests/test_hidden.py::test_add"],
        PASS_TO_PASS=["tests/test_visible.py::test_mul"],
        repo_path=str(repo),
    )


def _pick_task(task_id: str | None, root: Path) -> Task:
    from lego.tasks.sources import BuiltinSource

    try:
        source = BuiltinSource()
        if task_id:
            return source.get(task_id)
        return next(source.tasks())
    except (TaskError, StopIteration):
        if task_id:
            raise
        return _demo_task(root)


def _pct(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {
        "p50": statistics.median(s),
        "p95": s[min(len(s) - 1, round(0.95 * (len(s) - 1)))],
        "mean": statistics.fmean(s),
        "n": len(s),
    }


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _UnixHTTP(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def run_bench(n: int = 20, task_id: str | None = None) -> dict[str, object]:
    """Measure everything (see module doc) and return the JSON-able report."""
    from lego.sandboxes.factory import create_sandbox
    from lego.sandboxes.grading import grade
    from lego.sandboxes.runtime import python_runtime
    from lego.sandboxes.templates import pristine_template

    cfg = SandboxConfig()
    with tempfile.TemporaryDirectory(prefix="lego-bench-") as tmp_name:
        tmp = Path(tmp_name)
        task = _pick_task(task_id, tmp)
        sock = tmp / "proxy.sock"
        server = _UnixHTTP(str(sock), _Hello)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        template = pristine_template(task.repo_path or "")
        runtime = python_runtime()
        create_sandbox(cfg, task, proxy_uds=sock).close()  # warm-up: template, runtime, page cache
        create, first_exec, copy_spawn, grades, tests = [], [], [], [], []
        ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        for i in range(n):
            t0 = time.perf_counter()
            sb = create_sandbox(cfg, task, proxy_uds=sock)
            t1 = time.perf_counter()
            sb.exec("true")
            first_exec.append(time.perf_counter() - t1)
            create.append(t1 - t0)
            sb.close()

            t0 = time.perf_counter()
            dest = tmp / f"copy-{i}"
            shutil.copytree(template, dest, symlinks=True)
            subprocess.run(["true"], check=True)
            copy_spawn.append(time.perf_counter() - t0)

            for patch in (task.patch, task.test_patch):
                subprocess.run(["git", "apply"], input=patch, text=True, cwd=dest, check=True, capture_output=True)
            argv = [str(runtime.python), "-m", "pytest", "-p", "no:cacheprovider", "-q", *ids]
            t0 = time.perf_counter()
            run = subprocess.run(argv, cwd=dest, capture_output=True, env={"PYTHONDONTWRITEBYTECODE": "1"})
            tests.append(time.perf_counter() - t0)
            if run.returncode != 0:
                raise click.ClickException(f"baseline pytest failed ({shlex.join(argv)}): {run.stdout[-500:]!r}")
            shutil.rmtree(dest)

            t0 = time.perf_counter()
            result = grade(task, task.patch, cfg=cfg)
            grades.append(time.perf_counter() - t0)
            if result.reward != 1.0:
                raise click.ClickException(f"the gold patch of {task.instance_id} did not grade 1: {result.tests}")
        server.shutdown()
        server.server_close()
    c, g, base_c, base_t = _pct(create), _pct(grades), _pct(copy_spawn), _pct(tests)
    return {
        "bench": "sandbox",
        "task": task.instance_id,
        "backend": "local (bubblewrap + nsenter, socat proxy bridge)",
        "create_s": c,
        "first_exec_s": _pct(first_exec),
        "grade_s": g,
        "baseline": {"copy_spawn_s": base_c, "tests_s": base_t},
        "ratios": {
            "create_p50_vs_copy_spawn": c["p50"] / base_c["p50"],
            "grade_p50_vs_tests": g["p50"] / base_t["p50"],
        },
        "grade_overhead_s": {"p50": g["p50"] - base_t["p50"], "p95": g["p95"] - base_t["p95"]},
        "targets": {
            "create_p50_le_300ms": c["p50"] <= 0.300,
            "create_p95_le_300ms": c["p95"] <= 0.300,
            "grade_p50_le_tests_plus_500ms": g["p50"] <= base_t["p50"] + 0.5,
            "grade_p95_le_tests_plus_500ms": g["p95"] <= base_t["p95"] + 0.5,
        },
    }


@click.command("sandbox")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="JSON report path.")
@click.option("-n", "--iterations", "n", default=20, show_default=True, type=click.IntRange(2, 1000))
@click.option("--task", "task_id", default=None, help="A built-in task id (default: the first built-in task).")
def command(out: Path, n: int, task_id: str | None) -> None:
    """Local sandbox create-to-ready and grade latency (p50/p95) vs same-run baselines."""
    report = run_bench(n, task_id)
    atomic_write_json(out, report, indent=2)
    click.echo(json.dumps(report, indent=2))
