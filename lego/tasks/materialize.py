"""Materialising a task repository: the buggy library the agent sees, as a one-commit git repo.

Recipe (deterministic, so ``base_commit`` is the same on every machine):

1. copy the library (no caches, no git metadata; file modes normalised by git to 644),
2. apply the bug by reversing the gold patch (``git apply -R``),
3. delete the hidden test files (``test_patch`` re-adds them at grading time),
4. ``git init`` and make ONE commit with a fixed author, committer, date and message under a
   hermetic git config; then drop the reflog, hooks and description.

Nothing of the fix reaches the object store: only the buggy tree is ever committed. Repos are
cached under ``lego.paths.cache_dir()/tasks/<instance_id>`` and built in a temporary directory
that is renamed into place, so a crash never leaves a half-built repo behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.diffs import patch_files
from lego.tasks.testrun import copy_tree

__all__ = ["GIT_IDENTITY", "cached_repo", "git", "git_env", "head_commit", "materialize_repo"]

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "lego",
    "GIT_AUTHOR_EMAIL": "tasks@lego.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "lego",
    "GIT_COMMITTER_EMAIL": "tasks@lego.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}
COMMIT_MESSAGE = "Initial commit"


def git_env() -> dict[str, str]:
    """Environment for git that ignores the user's and the system's git config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    return env


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    """``git ARGS`` in ``repo`` under the hermetic config (:func:`git_env`); its stdout, or a
    :class:`TaskError` with git's message."""
    proc = subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        env=git_env(),
        input=stdin,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise TaskError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def head_commit(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def materialize_repo(source_dir: Path, patch: str, test_patch: str, dest: Path, *, every_file: bool = False) -> str:
    """Build the buggy one-commit repo in ``dest`` (which must not exist); return its commit id.

    ``every_file``: commit files the tree's own ``.gitignore`` names too. A real project's source
    distribution holds files its repository ignores because a build writes them (isodate's
    ``src/isodate/version.py``, written by setuptools-scm, which its ``__init__`` imports): the sdist
    is the project as it runs, so all of it is the task's repo."""
    if not source_dir.is_dir():
        raise TaskError(f"library source {source_dir} does not exist; reinstall lego or rebuild the task suite")
    dest.mkdir(parents=True)
    copy_tree(source_dir, dest)
    git(dest, "init", "-q", "-b", "main")
    if patch.strip():
        git(dest, "apply", "-R", "--whitespace=nowarn", "-", stdin=patch)
    for hidden in patch_files(test_patch):
        (dest / hidden).unlink(missing_ok=True)
    git(dest, "add", "-A", *(["-f"] if every_file else []))
    git(dest, "commit", "-q", "--no-verify", "-m", COMMIT_MESSAGE)
    for leftover in ("logs", "hooks", "description", "COMMIT_EDITMSG"):
        path = dest / ".git" / leftover
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    git(dest, "config", "core.logAllRefUpdates", "false")
    return head_commit(dest)


def cached_repo(
    instance_id: str, source_dir: Path, patch: str, test_patch: str, base_commit: str = "", *, every_file: bool = False
) -> Path:
    """The materialised repo for an instance, built on first use and reused while its commit matches."""
    root = cache_dir() / "tasks"
    final = root / instance_id
    if final.is_dir():
        try:
            if not base_commit or head_commit(final) == base_commit:
                return final
        except TaskError:
            pass
        shutil.rmtree(final, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{instance_id}.", dir=root))
    try:
        commit = materialize_repo(source_dir, patch, test_patch, scratch / "repo", every_file=every_file)
        if base_commit and commit != base_commit:
            raise TaskError(
                f"task {instance_id}: materialised commit {commit} differs from the recorded base_commit "
                f"{base_commit}; the library changed since the suite was built — run `lego tasks build`"
            )
        try:
            os.rename(scratch / "repo", final)
        except OSError:
            if not final.is_dir():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final
