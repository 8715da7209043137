"""A task as a person's own repository: its tests in the tree, nothing hidden.

A task's repo leaves out the tests that grade it (``test_patch`` adds them in the grader's sandbox
only). A person working on their own project has their tests in front of them and runs them:
:func:`with_visible_tests` makes that repository -- the task's base commit with ``test_patch``
applied and committed on top (fixed identity and date, so the commit is the same everywhere) --
and returns the task pointing at it, with nothing left to hide. It is what the simulated person
of :mod:`lego.conductor.simulated_use` works in; such a task must never be graded as a held-out
one (its tests were in the agent's view), and nothing here is used by `lego eval`.

Repos are cached under ``lego.paths.cache_dir()/tasks-visible/<instance_id>-<digest>`` (the digest
covers the base commit and the test patch), built in a temporary directory renamed into place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.materialize import git, head_commit
from lego.types import Task

__all__ = ["VISIBLE_COMMIT_MESSAGE", "with_visible_tests"]

VISIBLE_COMMIT_MESSAGE = "The project's tests"


def with_visible_tests(task: Task, root: Path | None = None) -> Task:
    """``task`` with its hidden tests committed into its repo (see the module doc); a task with no
    hidden tests is returned as it is."""
    if not task.test_patch.strip():
        return task
    if task.repo_path is None:
        raise TaskError(f"task {task.instance_id}: no local repo to add its tests to; materialise it first")
    digest = hashlib.sha256(f"{task.base_commit}\0{task.test_patch}".encode()).hexdigest()[:12]
    base = root if root is not None else cache_dir() / "tasks-visible"
    dest = base / f"{task.instance_id}-{digest}"
    if not (dest / ".git").is_dir():
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{task.instance_id}-", dir=base))
        try:
            repo = tmp / "repo"
            git(base, "clone", "-q", "--no-hardlinks", str(task.repo_path), str(repo))
            git(repo, "checkout", "-q", "-B", "main", task.base_commit or "HEAD")
            git(repo, "apply", "--whitespace=nowarn", "-", stdin=task.test_patch)
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", VISIBLE_COMMIT_MESSAGE)
            git(repo, "remote", "remove", "origin")
            try:
                os.rename(repo, dest)
            except OSError:
                if not (dest / ".git").is_dir():  # not a concurrent builder's finished copy: a real failure
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return task.model_copy(update={"repo_path": str(dest), "base_commit": head_commit(dest), "test_patch": ""})
