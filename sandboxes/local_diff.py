"""The agent's changes in a local sandbox, taken from outside it with lego's authority (see
:meth:`lego.sandboxes.local.LocalSandbox.diff`); the size caps both backends apply to a diff."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from lego.errors import SandboxError
from lego.sandboxes.processes import OutputCollector, kill_tree

__all__ = ["DIFF_FILE_CAP", "DIFF_OUTPUT_CAP", "host_diff"]

DIFF_FILE_CAP = 8 * 1024 * 1024
"""Files larger than this, and files that are neither regular files nor symlinks (FIFOs, sockets,
devices), are left out of a sandbox's diff: no fix needs one, and reading one could make the diff
hang or balloon."""
DIFF_OUTPUT_CAP = 64 * 1024 * 1024
"""The largest patch a diff may produce; a bigger one cannot be graded."""


def _left_out(root: Path) -> list[str]:
    """Repo paths a diff leaves out (see :data:`DIFF_FILE_CAP`), found without following any symlink."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [*filenames, *dirnames]:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            odd = not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode))
            if odd or (stat.S_ISREG(st.st_mode) and st.st_size > DIFF_FILE_CAP):
                out.append(os.path.normpath(os.path.join(rel, name)))
    return out


def host_diff(
    sandbox: str, *, root: Path, worktree: str, template: Path, base_commit: str, prefix: Sequence[str]
) -> str:
    """Diff the work tree ``worktree`` (as ``prefix`` sees it; ``root`` is the same tree as lego's
    process sees it) against ``base_commit`` in ``template``'s ``.git``, with a throwaway index and
    object directory. ``prefix`` (e.g. an ``nsenter`` into the sandbox's mount namespace) runs git."""
    specs = ["."] + [f":(exclude,literal){p}" for p in _left_out(root)]
    specs += [":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.py[co]"]
    script = (
        "t=$(mktemp -d) || exit 1; trap 'rm -rf \"$t\"' EXIT; "
        'export GIT_INDEX_FILE="$t/index" GIT_OBJECT_DIRECTORY="$t/objects"; mkdir "$t/objects" && '
        'git read-tree HEAD && git add -A --pathspec-from-file="$1" --pathspec-file-nul && '
        f"git diff --cached --binary --no-ext-diff --no-textconv --no-color --full-index {base_commit} --"
    )
    gitdir = str(template / ".git")
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "GIT_DIR": gitdir,
        "GIT_WORK_TREE": worktree,
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{gitdir}/objects",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_COUNT": "3",
        "GIT_CONFIG_KEY_0": "core.hooksPath",
        "GIT_CONFIG_VALUE_0": "/dev/null",
        "GIT_CONFIG_KEY_1": "core.fsmonitor",
        "GIT_CONFIG_VALUE_1": "false",
        "GIT_CONFIG_KEY_2": "core.untrackedCache",
        "GIT_CONFIG_VALUE_2": "false",
    }
    with tempfile.NamedTemporaryFile() as spec_file:
        spec_file.write(b"\0".join(s.encode() for s in specs))
        spec_file.flush()
        proc = subprocess.Popen(
            [*prefix, "/bin/sh", "-c", script, "sh", spec_file.name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
        )
        assert proc.stdout is not None and proc.stderr is not None
        reader = OutputCollector(
            os.dup(proc.stdout.fileno()), os.dup(proc.stderr.fileno()), None, None, cap=DIFF_OUTPUT_CAP
        )
        proc.stdout.close()
        proc.stderr.close()
        finished = reader.run(300)
        if not finished:
            kill_tree(proc)
        out, err = reader.result()
        proc.wait()
    if reader.overflow:
        raise SandboxError(
            f"the agent's changes in sandbox {sandbox} exceed {DIFF_OUTPUT_CAP >> 20} MiB as a patch; "
            "such a diff cannot be graded"
        )
    if not finished or proc.returncode != 0:
        raise SandboxError(
            f"git diff failed in sandbox {sandbox}: {err.decode(errors='replace').strip() or 'timed out'}"
        )
    return out.decode(errors="replace")
