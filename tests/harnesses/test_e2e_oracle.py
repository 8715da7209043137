"""Each real harness end to end with the oracle engine: harness process in a local bubblewrap
sandbox -> recording proxy (Unix socket) -> oracle (gold patch; logprobs from the tiny model) ->
the harness applies the patch with its own tools -> the hidden tests grade it.

Acceptance per harness: it ends ``completed``, the task grades reward 1, and the recorded
trajectory has at least one segment with mask-1 tokens whose logprobs are real numbers.
Third-party harnesses must be installed first (``lego harness install NAME``); those that are not
are skipped with that instruction.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harnesses.base import get_harness
from harnesses.install import installed
from lego.config import ProxyConfig, SandboxConfig
from lego.engines.oracle import OracleEngine
from lego.engines.transformers_engine import TransformersEngine
from lego.types import Endpoint, HarnessLimits, Task

pytestmark = pytest.mark.harness

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "tests/__init__.py": "",
    "tests/test_mul.py": "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n",
}
FIXED = FILES["calc.py"].replace("a - b", "a + b")
HIDDEN = "tests/test_add.py"
HIDDEN_TEXT = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    out = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env={**env, "PATH": "/usr/bin:/bin"}
    )
    return out.stdout


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """A small buggy repo at its base commit, the gold patch and a hidden failing test."""
    repo = tmp_path_factory.mktemp("calc-repo")
    for rel, text in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    (repo / "calc.py").write_text(FIXED)
    patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", "calc.py")
    (repo / HIDDEN).write_text(HIDDEN_TEXT)
    _git(repo, "add", "-N", HIDDEN)
    test_patch = _git(repo, "diff")
    _git(repo, "rm", "-q", "--cached", HIDDEN)
    (repo / HIDDEN).unlink()
    return Task(
        instance_id="calc__add-1",
        repo="local/calc",
        base_commit=_git(repo, "rev-parse", "HEAD").strip(),
        problem_statement="`calc.add(a, b)` returns the difference of its arguments instead of their sum. Fix it.",
        patch=patch,
        test_patch=test_patch,
        FAIL_TO_PASS=["tests/test_add.py::test_add"],
        PASS_TO_PASS=["tests/test_mul.py::test_mul"],
        repo_path=str(repo),
    )


@pytest.fixture(scope="module")
def proxy(tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from proxies.server import ProxyServer

    scorer = TransformersEngine(tiny_model_dir)
    engine = OracleEngine(chat_format, scorer)
    sock = tmp_path_factory.mktemp("proxy") / "proxy.sock"
    server = ProxyServer(engine, chat_format, ProxyConfig(uds=str(sock), default_max_tokens=4096))
    server.start()
    yield server
    server.stop()
    asyncio.run(scorer.close())


def run_one(name: str, task: Task, proxy: Any, limits: HarnessLimits) -> dict[str, Any]:
    """One rollout of harness ``name`` on ``task``; returns its result, grade and trajectory."""
    from sandboxes.grading import grade
    from sandboxes.local import LocalSandbox

    harness = get_harness(name)
    sid = f"{name}-{uuid.uuid4().hex[:8]}"
    proxy.open_session(sid, metadata={"gold_patch": task.patch, "task_id": task.instance_id})
    cfg = SandboxConfig(memory_mb=16384, command_timeout_s=limits.timeout_s)
    binds = harness.ro_binds() if hasattr(harness, "ro_binds") else []
    sandbox = LocalSandbox(task, cfg, proxy_uds=Path(proxy.uds), ro_binds=binds)
    try:
        root = f"http://127.0.0.1:{sandbox.proxy_port}/s/{sid}"
        endpoint = Endpoint(
            base_url=f"{root}/v1", anthropic_base_url=root, model=proxy.config.served_model_name, session_id=sid
        )
        harness.prepare(sandbox, endpoint)
        result = harness.run(task, sandbox, endpoint, limits)
        diff = sandbox.diff()
    finally:
        sandbox.close()
    graded = grade(task, diff, cfg=SandboxConfig())
    return {"result": result, "grade": graded, "trajectory": proxy.trajectory(sid), "version": harness.version()}


# openhands installs in over two minutes (pip resolves ~150 packages), so it runs with -m slow_harness.
HARNESS_NAMES = [
    "lego-agent",
    "mini-swe-agent",
    "aider",
    pytest.param("openhands", marks=pytest.mark.slow_harness),
    "opencode",
    "claude-code",
    "codex",
]


@pytest.mark.parametrize("name", HARNESS_NAMES)
def test_oracle_rollout_grades_reward_1(name: str, task: Task, proxy: Any) -> None:
    if name != "lego-agent" and installed(name) is None:
        pytest.skip(f"{name} is not installed; run `lego harness install {name}`")
    out = run_one(name, task, proxy, HarnessLimits(max_turns=10, timeout_s=300))
    result, graded, traj = out["result"], out["grade"], out["trajectory"]
    detail = f"{result.reason} exit={result.exit_code}\n{result.logs[-3000:]}\n{graded.log[-1500:]}"
    assert result.reason == "completed", detail
    assert graded.reward == 1.0, detail
    sampled = [s for s in traj.segments if s.num_sampled > 0]
    assert sampled, f"no segment with sampled tokens: {traj.counters}"
    logprobs = [lp for s in sampled for lp, m in zip(s.response_logprobs, s.response_mask, strict=True) if m == 1]
    assert logprobs and all(lp is not None and math.isfinite(lp) and lp <= 0 for lp in logprobs)
    assert out["version"]


def test_a_crashing_harness_is_a_harness_error_and_the_next_rollout_is_unaffected(task: Task, proxy: Any) -> None:
    from sandboxes.local import LocalSandbox

    harness = get_harness("lego-agent")
    sandbox = LocalSandbox(task, SandboxConfig(), proxy_uds=Path(proxy.uds))
    try:
        wrong = f"http://127.0.0.1:{sandbox.proxy_port}/no/such/route/v1"
        endpoint = Endpoint(base_url=wrong, anthropic_base_url=wrong)
        harness.prepare(sandbox, endpoint)
        result = harness.run(task, sandbox, endpoint, HarnessLimits(max_turns=3, timeout_s=120))
    finally:
        sandbox.close()
    assert result.reason == "harness_error" and result.exit_code == 1
    assert "HTTP 404" in result.logs
    again = run_one("lego-agent", task, proxy, HarnessLimits(max_turns=10, timeout_s=300))
    assert again["result"].reason == "completed" and again["grade"].reward == 1.0


def test_a_hanging_harness_times_out(task: Task, proxy: Any) -> None:
    if installed("mini-swe-agent") is None:
        pytest.skip("mini-swe-agent is not installed; run `lego harness install mini-swe-agent`")
    out = run_one("mini-swe-agent", task, proxy, HarnessLimits(max_turns=10, timeout_s=1))
    assert out["result"].reason == "timeout" and out["result"].exit_code is None
