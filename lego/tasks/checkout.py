"""A user's own repository as a task's repo, pinned at the task's ``base_commit``.

A JSONL record may point ``repo_path`` at a working clone of your project, with its full history,
and name the buggy commit in ``base_commit``. Sandboxes start from the committed tree at the repo's
HEAD (:mod:`lego.sandboxes.templates`), so when HEAD is another commit (you moved on, or the fix is
already committed) the task would start from the wrong code. :func:`at_base_commit` gives such a
task a checkout of exactly ``base_commit``'s tree instead: one fresh commit, no history (so the fix
cannot be dug out of it), built once under ``lego.paths.cache_dir()/tasks/checkouts`` and reused.
Uncommitted changes in your clone never reach a task either way.

:func:`own_environment` then gives the task what its record leaves implicit, as a developer's checkout
has it: the repo's import roots found from its layout when the record names none (``src`` for a src/
layout, as ``lego tasks make`` records them: otherwise its package is not importable at all, or the
grader's interpreter imports an installed copy of it instead of the repo under test), and the
environment the record names (``requirements``, ``python``) built, so its tests run with their own
dependencies instead of lego's bare pytest runtime.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.environments import build_environment
from lego.tasks.materialize import git_env
from lego.tasks.realrepo import inspect_layout
from lego.types import Task, TaskEnvironment

__all__ = ["at_base_commit", "own_environment"]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=git_env(), check=False)


def _build(repo: Path, commit: str, dest: Path) -> None:
    tree = _git(repo, "archive", "--format=tar", commit)
    if tree.returncode != 0:
        raise TaskError(f"cannot read commit {commit} of {repo}: {tree.stderr.decode(errors='replace').strip()}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tree.stdout)) as tar:
        tar.extractall(dest, filter="data")
    for args in (("init", "-q", "-b", "main"), ("add", "-A", "-f"), ("commit", "-q", "--no-verify", "-m", commit)):
        step = _git(dest, "-c", "commit.gpgsign=false", *args)
        if step.returncode != 0:
            raise TaskError(f"git {args[0]} failed in {dest}: {step.stderr.decode(errors='replace').strip()}")


def at_base_commit(task: Task) -> Task:
    """``task`` with ``repo_path`` at a checkout of its ``base_commit`` (see module doc); unchanged when
    the repo is not a git checkout (:func:`lego.tasks.sources.require_repo` reports that), names no
    base commit, or its HEAD is that commit."""
    if not task.repo_path or not task.base_commit or not (Path(task.repo_path) / ".git").exists():
        return task
    repo = Path(task.repo_path)
    root = cache_dir() / "tasks" / "checkouts"
    if repo.resolve().parent == root.resolve():
        return task  # made here already: materialising a ready task again leaves it as it is
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{task.base_commit}^{{commit}}")
    if found.returncode != 0:
        raise TaskError(
            f"task {task.instance_id}: base_commit {task.base_commit} is not a commit of {repo}; fetch it there "
            "or correct the record"
        )
    commit = found.stdout.decode().strip()
    if _git(repo, "rev-parse", "HEAD").stdout.decode().strip() == commit:
        return task
    final = root / hashlib.sha256(f"{repo.resolve()}\0{commit}".encode()).hexdigest()[:20]
    if not (final / ".git").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".checkout.", dir=root))
        try:
            _build(repo, commit, scratch / "repo")
            try:
                os.rename(scratch / "repo", final)
            except OSError:
                if not (final / ".git").is_dir():  # not a lost race with another builder
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return task.model_copy(update={"repo_path": str(final)})


def own_environment(task: Task) -> Task:
    """A local repo's ``task`` with the import roots of its layout when its record names none, and the
    environment its record names built (see module doc). An image task, or one whose environment is
    built already, is left as it is; a flat layout without an environment keeps lego's own runtime."""
    if not task.repo_path or task.image or task.dockerfile or not Path(task.repo_path).is_dir():
        return task
    env = task.environment
    if env is not None and env.path:
        return task
    if env is None or "import_roots" not in env.model_fields_set:
        roots = inspect_layout(Path(task.repo_path)).import_roots
        if roots != ["."]:
            env = (env or TaskEnvironment()).model_copy(update={"import_roots": roots})
    if env is not None and (env.requirements or (env.python and not env.python.startswith("/"))):
        env = build_environment(env)
    return task if env is task.environment else task.model_copy(update={"environment": env})
