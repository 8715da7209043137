"""A tiny buggy library in a real git repo, as a Task (shared by the sandbox tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lego.types import Task

LIB_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
LIB_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
VISIBLE_TEST = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
HIDDEN_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n"


def git_in(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def commit_tree(repo: Path, files: dict[str, str]) -> Path:
    """``files`` (path -> text) written under ``repo`` and committed as its one commit."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git_in(repo, "init", "-q")
    git_in(repo, "add", "-A")
    git_in(repo, "commit", "-qm", "base")
    return repo


def _patch(repo: Path, path: str, text: str) -> str:
    """The git patch that writes ``text`` to ``path`` (the repo is left as it was)."""
    target = repo / path
    old = target.read_text() if target.exists() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git_in(repo, "add", "-A")
    out = git_in(repo, "diff", "--cached", "--binary")
    git_in(repo, "reset", "-q")
    if old is None:
        target.unlink()
    else:
        target.write_text(old)
    return out


def make_task(root: Path, name: str = "calc-1") -> Task:
    """A one-commit repo with ``add`` broken; the hidden tests check ``add``."""
    repo = root / name
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text(LIB_BUGGY)
    (repo / "tests" / "test_visible.py").write_text(VISIBLE_TEST)
    git_in(repo, "init", "-q")
    git_in(repo, "add", "-A")
    git_in(repo, "commit", "-qm", "base")
    return Task(
        instance_id=name,
        repo="lego/calc",
        problem_statement="add(2, 3) returns -1 instead of 5.",
        patch=_patch(repo, "calc/__init__.py", LIB_FIXED),
        test_patch=_patch(repo, "tests/test_hidden.py", HIDDEN_TEST),
        FAIL_TO_PASS=["tests/test_hidden.py::test_add"],
        PASS_TO_PASS=["tests/test_visible.py::test_mul", "tests/test_hidden.py::test_add_zero"],
        repo_path=str(repo),
    )
