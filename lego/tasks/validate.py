"""Validating task instances: the gold patch passes every named test, the base fails every FAIL_TO_PASS.

By default each check goes through the real grader (:func:`lego.sandboxes.grading.grade`: a fresh local
sandbox, the diff filtered, the hidden tests applied, results from a report the agent never saw).
``use_grader=False`` runs the same checks with plain subprocesses in a scratch copy of the repo and
junit XML (no isolation; for machines without bubblewrap).

An error in one task (missing repo, a patch that does not apply) fails that task, never the run.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lego.errors import LegoError
from lego.tasks.materialize import git_env
from lego.tasks.sources import require_repo
from lego.tasks.testrun import copy_tree, run_pytest
from lego.types import Task

__all__ = ["TaskValidation", "validate_task"]


@dataclass
class TaskValidation:
    instance_id: str
    ok: bool
    reason: str = ""
    gold: dict[str, str] = field(default_factory=dict)
    base: dict[str, str] = field(default_factory=dict)


def _judge(task: Task, gold: dict[str, str], base: dict[str, str]) -> TaskValidation:
    problems = []
    bad_gold = sorted(t for t in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS] if gold.get(t) != "passed")
    if bad_gold:
        problems.append(
            f"gold: {len(bad_gold)} test(s) not passing, e.g. {bad_gold[0]} ({gold.get(bad_gold[0], 'missing')})"
        )
    passing_f2p = sorted(t for t in task.FAIL_TO_PASS if base.get(t) == "passed")
    if passing_f2p:
        problems.append(f"base: FAIL_TO_PASS test {passing_f2p[0]} passes without the fix")
    bad_p2p = sorted(t for t in task.PASS_TO_PASS if base.get(t) != "passed")
    if bad_p2p:
        problems.append(f"base: PASS_TO_PASS test {bad_p2p[0]} is {base.get(bad_p2p[0], 'missing')}")
    return TaskValidation(task.instance_id, not problems, "; ".join(problems), gold, base)


def _apply(repo: Path, patch: str) -> None:
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        cwd=repo,
        input=patch,
        env=git_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise LegoError(f"patch does not apply: {proc.stderr.strip()}")


def _run_plain(task: Task, repo: Path, patch: str) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="lego-validate-") as tmp:
        work = Path(tmp)
        copy_tree(repo, work)
        if patch.strip():
            _apply(work, patch)
        if task.test_patch.strip():
            _apply(work, task.test_patch)
        result = run_pytest(work, [*task.FAIL_TO_PASS, *task.PASS_TO_PASS])
        return result.statuses


def validate_task(task: Task, use_grader: bool = True) -> TaskValidation:
    """Check one instance: gold resolves it, the unpatched base does not (see module doc)."""
    try:
        repo = require_repo(task)
        if use_grader:
            from lego.sandboxes.grading import grade

            gold = grade(task, task.patch).tests
            base = grade(task, "").tests
        else:
            gold = _run_plain(task, repo, task.patch)
            base = _run_plain(task, repo, "")
    except LegoError as exc:
        return TaskValidation(task.instance_id, False, f"{type(exc).__name__}: {exc}")
    return _judge(task, gold, base)
