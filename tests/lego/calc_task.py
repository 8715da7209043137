"""A tiny real SWE task for loop tests: a git repo whose ``add`` subtracts, a gold patch, and a
hidden test file re-added by ``test_patch`` (the shape every built-in task has)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lego.types import Task

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "tests/__init__.py": "",
    "tests/test_mul.py": "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n",
}
HIDDEN = "tests/test_add.py"
HIDDEN_TEXT = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": "2020-01-01T00:00:00",
        "GIT_COMMITTER_DATE": "2020-01-01T00:00:00",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=env).stdout


def make_calc_task(root: Path, instance_id: str = "calc-0") -> Task:
    """Write the repo under ``root/calc`` and return its task record (``repo_path`` set)."""
    repo = root / "calc"
    for rel, text in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    (repo / "calc.py").write_text(FILES["calc.py"].replace("a - b", "a + b"))
    patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", "calc.py")
    (repo / HIDDEN).write_text(HIDDEN_TEXT)
    _git(repo, "add", "-N", HIDDEN)
    test_patch = _git(repo, "diff")
    _git(repo, "rm", "-q", "--cached", HIDDEN)
    (repo / HIDDEN).unlink()
    return Task(
        instance_id=instance_id,
        repo="local/calc",
        base_commit=_git(repo, "rev-parse", "HEAD").strip(),
        split="train",
        problem_statement="`calc.add(2, 3)` returns -1; it should return the sum, 5.",
        patch=patch,
        test_patch=test_patch,
        FAIL_TO_PASS=["tests/test_add.py::test_add"],
        PASS_TO_PASS=["tests/test_mul.py::test_mul"],
        repo_path=str(repo),
    )


def make_calc_tasks(root: Path, n: int = 2) -> Path:
    """``n`` task records sharing one repo, written to ``root/tasks.jsonl``."""
    first = make_calc_task(root)
    rows = [first.model_copy(update={"instance_id": f"calc-{i}"}) for i in range(n)]
    path = root / "tasks.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return path


def train_overrides(tasks: Path, model: Path, out: Path, steps: int) -> list[str]:
    """`lego train` -o flags for a short run on these tasks: one task × two rollouts a step, two turns."""
    return [
        f"tasks.source={tasks}",
        f"engine.model={model}",
        f"training.out_dir={out}",
        f"training.steps={steps}",
        "training.tasks_per_step=1",
        "algorithm.group_size=2",
        "harness.max_turns=2",
        "harness.options={lego-agent = {max_tokens = 24}}",
        "training.lr=1e-3",
        # the short runs built on these count their rollouts and trajectories: no canary among them
        # (test_train_writes_a_faithful_run turns the default's back on)
        "tasks.canary_rate=0",
    ]
