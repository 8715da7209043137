"""What every new sandbox starts from: a fresh id and the pristine, history-stripped repo template.

Every rollout starts from a *pristine template* of the task's repo: the committed tree of
``task.repo_path`` re-committed into a brand-new git repository with exactly one commit, no remotes,
no reflog, no hooks and no object that is not reachable from that commit. The template is built once
per (repo, HEAD) and cached under ``lego.paths.cache_dir()/sandbox-templates``; a sandbox is a plain
copy of it. Re-committing (rather than pruning the original ``.git``) makes the strip hold by
construction: the fix's objects were never copied, so no ``gc`` can miss them.
:func:`verify_history_strip` checks the result anyway, and the check is the ``history_strip`` guard.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from lego.errors import SandboxError, TaskError
from lego.paths import cache_dir

__all__ = [
    "GIT_SAFE_ARGS",
    "git",
    "pristine_template",
    "sandbox_id",
    "template_info",
    "verify_history_strip",
]

# Options that stop git from running anything configured in a repo it reads (hooks, fsmonitor,
# external diff / textconv drivers): the host only ever runs git on repos it built itself, but these
# keep that true even if a caller points it elsewhere.
GIT_SAFE_ARGS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "protocol.allow=never")

# A fixed identity and date make the template's single commit hash a function of the tree alone.
_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "lego",
    "GIT_AUTHOR_EMAIL": "lego@localhost",
    "GIT_COMMITTER_NAME": "lego",
    "GIT_COMMITTER_EMAIL": "lego@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def sandbox_id() -> str:
    """A fresh sandbox's id: it names the sandbox's directories, cgroup and containers."""
    return uuid.uuid4().hex[:12]


def git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run host git on a repo lego built; return stdout. Raises SandboxError with git's message."""
    full_env = {**os.environ, **_COMMIT_ENV, **(env or {})}
    proc = subprocess.run(
        ["git", *GIT_SAFE_ARGS, "-C", str(repo), *args], capture_output=True, text=True, env=full_env, check=False
    )
    if check and proc.returncode != 0:
        raise SandboxError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _source_key(src: Path) -> str:
    if (src / ".git").exists():
        head = git(src, "rev-parse", "HEAD^{tree}").strip()
    else:
        h = hashlib.sha256()
        for p in sorted(src.rglob("*")):
            if p.is_file():
                st = p.stat()
                h.update(f"{p.relative_to(src)}:{st.st_size}:{st.st_mtime_ns}".encode())
        head = h.hexdigest()
    return hashlib.sha256(f"{src}\0{head}".encode()).hexdigest()[:20]


def _export_tree(src: Path, dest: Path) -> None:
    """Write the committed tree of ``src`` (HEAD) into ``dest``, without touching src's index."""
    if not (src / ".git").exists():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        return
    index = dest.parent / f".{dest.name}.index"
    env = {"GIT_INDEX_FILE": str(index)}
    git(src, "read-tree", "HEAD", env=env)
    git(src, "checkout-index", "-a", "-f", f"--prefix={dest}/", env=env)
    index.unlink(missing_ok=True)


def pristine_template(repo_path: str | Path) -> Path:
    """The cached, history-stripped template of ``repo_path`` (built on first use, atomically).

    Raises TaskError if the repo is missing, SandboxError if the strip cannot be verified.
    """
    src = Path(repo_path).expanduser().resolve()
    if not src.is_dir():
        raise TaskError(f"task repo {src} does not exist; rebuild the task (lego tasks build) or fix its repo_path")
    root = cache_dir() / "sandbox-templates"
    final = root / _source_key(src)
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    try:
        tree = tmp / "repo"
        tree.mkdir()
        _export_tree(src, tree)
        shutil.rmtree(tree / ".git", ignore_errors=True)
        git(tree, "init", "-q", "-b", "main")
        git(tree, "add", "-A", "-f")
        git(tree, "commit", "-q", "--no-verify", "--allow-empty", "-m", "pristine")
        for extra in ("logs", "hooks", "description", "info/exclude", "COMMIT_EDITMSG", "ORIG_HEAD"):
            p = tree / ".git" / extra
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        git(tree, "config", "core.logAllRefUpdates", "false")
        if not verify_history_strip(tree):
            raise SandboxError(f"history strip of {src} did not verify; report this as a lego bug")
        try:
            os.replace(tree, final)
        except OSError:
            if not final.is_dir():  # lost a race to a concurrent builder: theirs is as good as ours
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


_TEMPLATE_INFO: dict[Path, tuple[str, bool]] = {}


def template_info(template: Path) -> tuple[str, bool]:
    """(HEAD commit, history strip verified) of a template, computed once per process: templates
    are immutable (agents only ever see them read-only), so a byte copy inherits both."""
    info = _TEMPLATE_INFO.get(template)
    if info is None:
        info = (git(template, "rev-parse", "HEAD").strip(), verify_history_strip(template))
        _TEMPLATE_INFO[template] = info
    return info


def verify_history_strip(repo: str | Path) -> bool:
    """True iff ``repo`` holds exactly one commit, no remotes, no reflog, no other refs, no stash,
    no alternates and no object unreachable from that commit (so nothing of a later fix)."""
    repo = Path(repo)
    gitdir = repo / ".git"
    if not gitdir.is_dir():
        return False
    if (gitdir / "objects" / "info" / "alternates").exists() or (gitdir / "packed-refs").exists():
        return False
    for leftover in ("ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "shallow", "refs/stash"):
        if (gitdir / leftover).exists():
            return False
    logs = gitdir / "logs"
    if logs.exists() and any(p.is_file() and p.stat().st_size for p in logs.rglob("*")):
        return False
    try:
        if git(repo, "remote").strip():
            return False
        refs = git(repo, "for-each-ref", "--format=%(refname)").split()
        if len(refs) != 1:
            return False
        commits = git(repo, "rev-list", "--all").split()
        if len(commits) != 1:
            return False
        reachable = len(git(repo, "rev-list", "--objects", "--all").splitlines())
        counts = dict(line.split(": ", 1) for line in git(repo, "count-objects", "-v").splitlines() if ": " in line)
        total = int(counts.get("count", 0)) + int(counts.get("in-pack", 0))
    except SandboxError:
        return False
    return total == reachable
