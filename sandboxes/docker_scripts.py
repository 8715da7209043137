"""The programs the docker backend runs inside a container as root, and the fixed command lines
and environments around them (what each guarantees is in :mod:`lego.sandboxes.docker`)."""

from __future__ import annotations

from lego.sandboxes.layout import AGENT_UID
from lego.sandboxes.local_diff import DIFF_FILE_CAP

__all__ = ["AS_AGENT", "GIT_ENV", "KEEPER", "KILL_ALL", "STRIP", "STRIP_CHECK", "WRAPPER", "diff_script"]

# setpriv's options that turn a root process into the agent: no capability in any set, no way back.
AS_AGENT = [
    f"--reuid={AGENT_UID}",
    f"--regid={AGENT_UID}",
    "--clear-groups",
    "--bounding-set=-all",
    "--inh-caps=-all",
    "--no-new-privs",
    "--",
]
# Strips the history of a repo that lives in the image (a task with an image only), in place.
STRIP = (
    'set -e; cd "$1"; git remote | xargs -r -n1 git remote remove; '
    "git for-each-ref --format='%(refname)' | grep -v \"^$(git symbolic-ref -q HEAD || echo NONE)$\" "
    "| xargs -r -n1 git update-ref -d; git stash clear; git reflog expire --expire=now --all; "
    "rm -f .git/ORIG_HEAD .git/FETCH_HEAD .git/packed-refs.lock; git gc -q --prune=now"
)
# Exits 0 iff the repo at "$1" holds one commit, no remote and no reflog.
STRIP_CHECK = (
    'cd "$1" && test $(git rev-list --all | wc -l) -eq 1 && test -z "$(git remote)" && test -z "$(git reflog)"'
)
# git as root on the agent's files: no system, global or repo setting can run a program, and the
# agent's ownership of the repo does not make git refuse it.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_COUNT": "4",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
    "GIT_CONFIG_KEY_2": "core.untrackedCache",
    "GIT_CONFIG_VALUE_2": "false",
    "GIT_CONFIG_KEY_3": "safe.directory",
    "GIT_CONFIG_VALUE_3": "*",
}
# Python source of ``agents()``: the live (not zombie) pids of the agent's uid, read from /proc.
AGENT_PIDS = f"""
def agents():
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{{p}}/status") as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except (OSError, ValueError):
            continue
        if fields.get("Uid", "").split()[:1] == ["{AGENT_UID}"] and fields.get("State", "").split()[:1] != ["Z"]:
            out.append(int(p))
    return out
"""
# Runs as root with lego's runtime python: until no live process of the agent's uid is left, a
# child that became that uid sends kill(-1, SIGKILL), which the kernel applies to all of them at
# once (a fork cannot complete during it), sparing only the sender.
KILL_ALL = f"""
import os, sys, time
{AGENT_PIDS}deadline = time.monotonic() + 20
while left := agents():
    if time.monotonic() > deadline:
        sys.exit("processes of uid {AGENT_UID} survived 20 s of SIGKILL")
    try:
        pid = os.fork()
    except OSError:  # the pids limit is full (a fork bomb): one by one, which frees slots
        for p in left:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        continue
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid({AGENT_UID})
            os.setuid({AGENT_UID})
            os.kill(-1, 9)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.005)
"""


# Every command of the agent's runs under this, as root with lego's runtime python (argv: the marker
# ``lego-exec``, the wall-time limit, then ``setpriv ... -- env -i -- VARS command``). It resumes every stopped
# process of the agent, becomes a child subreaper (daemons the command leaves, setsid or not, stay
# its descendants) and runs the command in a session of its own. At the deadline it kills the
# command and every descendant. When the command ends, before reaping it (so its pid still answers
# ``kill -0``), it stops (SIGSTOP, until none is left running) every process of the agent that no
# other running command of lego's owns: nothing the agent leaves behind can act between lego's
# commands (e.g. write the fix once the harness has returned, before lego kills it); the next
# command resumes them, :meth:`DockerSandbox.kill_agent_processes` ends them.
WRAPPER = f"""
import ctypes, os, select, signal, sys, time
limit, cmd = float(sys.argv[2]), sys.argv[3:]
def procs():
    out = {{}}
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{{p}}/stat") as f:
                tail = f.read().rsplit(")", 1)[1].split()
            out[int(p)] = (tail[0], int(tail[1]))
        except (OSError, ValueError, IndexError):
            pass
    return out
def status_uid(pid):
    try:
        with open(f"/proc/{{pid}}/status") as f:
            return next(ln.split()[1] for ln in f if ln.startswith("Uid:"))
    except (OSError, StopIteration):
        return ""
for pid, (state, _) in procs().items():
    if state in "Tt" and status_uid(pid) == "{AGENT_UID}":
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
main = os.fork()
if main == 0:
    os.setsid()
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        sys.stderr.write(f"{{cmd[0]}}: {{e.strerror}}\\n")
        os._exit(127)
fd = os.pidfd_open(main)
deadline = time.monotonic() + limit
timed_out = False
while True:
    left = deadline - time.monotonic()
    if left <= 0:
        timed_out = True
        break
    if select.select([fd], [], [], min(left, 0.05))[0]:
        break
    while True:
        got = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if got is None or got.si_pid == main:
            break
        os.waitpid(got.si_pid, 0)
me = os.getpid()
def is_wrapper(pid):
    try:
        with open(f"/proc/{{pid}}/cmdline", "rb") as f:
            return f.read().split(b"\\0")[5:6] == [b"lego-exec"] and status_uid(pid) == "0"
    except OSError:
        return False
def below(table, roots):
    out, grew = set(), True
    while grew:
        grew = False
        for pid, (_, ppid) in table.items():
            if pid not in out and (ppid in roots or ppid in out):
                out.add(pid)
                grew = True
    return out
for _ in range(1000):
    table = procs()
    if timed_out:
        todo = [p for p in below(table, {{me}}) | {{main}} if table.get(p, ("Z",))[0] not in ("Z", "X")]
        sig = signal.SIGKILL
    else:
        busy = below(table, {{p for p in table if p != me and is_wrapper(p)}})
        todo = [
            p for p, (state, _) in table.items()
            if state not in "ZXTt" and p != main and p not in busy and status_uid(p) == "{AGENT_UID}"
        ]
        sig = signal.SIGSTOP
    if not todo:
        if timed_out:
            timed_out = None
            continue
        break
    for pid in todo:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    time.sleep(0.001)
_, status = os.waitpid(main, 0)
code = os.waitstatus_to_exitcode(status)
os._exit(124 if timed_out is None else (code if code >= 0 else 128 - code))
"""


# The container's main process (tini's child), as root: on SIGUSR1 it SIGKILLs every process of
# the agent's uid, one by one, until none is left. It needs no new process, so it works when the
# agent's processes hold every slot of the pids limit and no command (not even lego's) can start.
KEEPER = f"""
import os, signal, time
{AGENT_PIDS}def kill_all(*_):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        left = agents()
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
signal.signal(signal.SIGUSR1, kill_all)
while True:
    signal.pause()
"""


def diff_script(base_commit: str) -> str:
    """The shell script that prints the agent's changes against ``base_commit`` (run as root with
    :data:`GIT_ENV`, ``GIT_DIR`` the pristine ``.git`` and ``GIT_WORK_TREE`` the repo): a throwaway
    index and object directory, files over ``DIFF_FILE_CAP`` and non-regular files left out."""
    return (
        "set -e; t=$(mktemp -d -p /lego); trap 'rm -rf \"$t\"' EXIT; "
        'export GIT_INDEX_FILE="$t/index" GIT_OBJECT_DIRECTORY="$t/objects"; mkdir "$t/objects"; '
        'cd "$GIT_WORK_TREE"; { printf ".\\0"; '
        f"find . -path ./.git -prune -o \\( ! -type d ! -type l ! -type f -o -type f -size +{DIFF_FILE_CAP // 1024}k \\) "
        "-printf ':(exclude,literal)%P\\0'; } > \"$t/specs\"; "
        "git read-tree HEAD; "
        'git add -A --pathspec-from-file="$t/specs" --pathspec-file-nul; '
        f"git diff --cached --binary --no-ext-diff --no-textconv --no-color --full-index {base_commit} -- "
        "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.py[co]'"
    )
