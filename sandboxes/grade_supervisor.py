"""The grading supervisor: runs inside a grading sandbox, as the first and only process there.

Not imported by lego: :mod:`lego.sandboxes.grading` runs it as ``python -I -S -B -c <this file>`` with
the task's interpreter (Python >= 3.6: SWE-bench images carry old ones), standard library only, and
sends its whole input as ONE JSON document on stdin: nothing of the grade is ever written to a file
the test run could read (no plan, no patch file, no expected value; the hidden tests are in the repo
only as the run is meant to see them). It

1. makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``) before reading its input: processes of
   the same uid can then neither ptrace it nor open its ``/proc/<pid>/{mem,fd,environ}``;
2. applies the hidden ``test_patch`` to the pristine repo (failure: the task is broken), writes the
   hidden test files as this run is to see them (the blind copy, in the blind run),
   then applies the agent's filtered diff (failure: the agent's diff does not apply) — patches reach
   git on its stdin;
3. runs pytest (:mod:`lego.sandboxes.grade_bootstrap`) as its child with stdin ``/dev/null``, stdout
   and stderr into one pipe, and one more pipe for the records, in a session of its own;
4. once the child has exited (or timed out) kills the child's process group, keeps the record lines
   that had arrived, and prints ONE JSON document, carrying the grade's nonce, on its own stdout,
   which no child inherits.
"""

import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

_PR_SET_DUMPABLE = 4
_OUTPUT_TAIL = 8000
_MAX_RECORD_BYTES = 8 * 1024 * 1024


def _git_apply(patch, repo):
    """Apply ``patch`` (text) with git in ``repo``; None on success, else git's error."""
    if not patch.strip():
        return None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    run = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "--binary", "-"],
        cwd=repo,
        env=env,
        input=patch.encode("utf-8", "surrogateescape"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if run.returncode == 0:
        return None
    return (run.stderr or run.stdout).decode("utf-8", "replace").strip()[-2000:]


def _write_files(repo, files):
    for rel, text in files.items():
        path = os.path.join(repo, rel)
        if os.path.islink(path):
            os.unlink(path)
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8", "surrogateescape"))


def _feed(fd, data):
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the child died before it read its configuration: its report says so
    finally:
        os.close(fd)


def _run_child(argv, env, cwd, timeout):
    """``argv`` is the bootstrap's command with its CONFIG (JSON) as ``argv[5]``: the child gets the
    record pipe's fd and a pipe it reads CONFIG from instead (one argument holds at most 128 KiB on
    Linux, and a real suite's expected ids alone can be more)."""
    config = json.loads(argv[5])
    scratch = None
    if config.get("meta"):  # the project's dist-info goes here; it is removed when the child is gone,
        scratch = tempfile.mkdtemp(prefix="lego-meta-")  # however it ended (unisolated, /tmp is the host's)
        config["meta_dir"] = scratch
    try:
        return _supervise(argv, json.dumps(config).encode("utf-8", "surrogateescape"), env, cwd, timeout)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _supervise(argv, config, env, cwd, timeout):
    out_r, out_w = os.pipe()
    rec_r, rec_w = os.pipe()
    cfg_r, cfg_w = os.pipe()
    child = subprocess.Popen(
        [*argv[:5], str(rec_w), str(cfg_r), *argv[6:]],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out_w,
        stderr=out_w,
        pass_fds=(rec_w, cfg_r),
        start_new_session=True,
    )
    os.close(out_w)
    os.close(rec_w)
    os.close(cfg_r)
    feeder = threading.Thread(target=_feed, args=(cfg_w, config))
    feeder.daemon = True
    feeder.start()
    bufs = {out_r: bytearray(), rec_r: bytearray()}
    deadline = time.monotonic() + timeout
    timed_out = False
    open_fds = [out_r, rec_r]
    while child.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready = select.select(open_fds, [], [], min(left, 0.05))[0] if open_fds else []
        if not open_fds:
            time.sleep(min(left, 0.01))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk and len(bufs[fd]) < _MAX_RECORD_BYTES:
                bufs[fd] += chunk
            elif not chunk:
                open_fds.remove(fd)
    try:  # the child is gone (or out of time): nothing it left behind gets the last word
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    code = child.wait()
    for fd in list(open_fds):  # what was already in the pipes, without waiting for stragglers
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk or len(bufs[fd]) >= _MAX_RECORD_BYTES:
                break
            bufs[fd] += chunk
    for fd in bufs:
        os.close(fd)
    return {
        "exit_code": code,
        "timed_out": timed_out,
        "records": bufs[rec_r].decode("utf-8", "replace").splitlines(),
        "output": bufs[out_r][-_OUTPUT_TAIL:].decode("utf-8", "replace"),
    }


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(json.dumps({"status": "grader_error", "error": "prctl failed: errno %d" % ctypes.get_errno()}))
        return
    plan = json.loads(sys.stdin.buffer.read().decode("utf-8", "surrogateescape"))
    repo = plan["repo"]
    report = {"nonce": plan["nonce"]}
    err = _git_apply(plan["test_patch"], repo)
    if err is not None:
        report.update(status="test_patch_failed", error=err)
    else:
        _write_files(repo, plan["files"])
        err = _git_apply(plan["agent_patch"], repo)
        if err is not None:
            report.update(status="agent_patch_failed", error=err)
        else:
            report["status"] = "ran"
            # the test run gets no PYTHON* variable but the grader's (it runs without -E: PYTHONHASHSEED)
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
            env.update(plan["env"])
            # started in "/", not the repo: the run has no -I, so its sys.path begins with its working
            # directory until the bootstrap has set it (an agent's json.py there would run first)
            report.update(_run_child(plan["argv"], env, "/", float(plan["timeout"])))
    sys.stdout.write(json.dumps(report))
    sys.stdout.flush()


main()
