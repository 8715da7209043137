"""Shared real components of the harness tests: a small task repo with a hidden test, and the
recording proxy (Unix socket) in front of the oracle engine, whose logprobs come from the tiny model."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig
from lego.engines.oracle import OracleEngine
from lego.engines.transformers_engine import TransformersEngine
from lego.types import Task

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
