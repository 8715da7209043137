"""The grading supervisor: runs inside the grading sandbox, as the first and only process there.

Not imported by lego: :mod:`lego.sandboxes.grading` copies this file into a fresh grading sandbox and runs
it with ``python -I -S -B supervisor.py WORK`` (standard library only, nothing from the repo on its
path). It is the one process whose output lego trusts, so it

1. makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``) before anything else: processes of the
   same uid can then neither ptrace it nor open its ``/proc/<pid>/{mem,fd,environ}``;
2. takes the per-grade nonce out of its environment (only it saw that environment);
3. applies the hidden ``test_patch`` to the pristine repo (failure: the task is broken), appends the
   canary tests, then applies the agent's filtered diff (failure: the agent's diff does not apply),
   and reads the Python files that diff changed, before any of their code runs, for comparisons
   the change redefined (:func:`_comparison_overrides`);
4. runs pytest (:mod:`lego.sandboxes.grade_bootstrap`) as a child with stdin ``/dev/null``, stdout and
   stderr into a pipe of its own, and one more pipe for the reporter's records, in its own session;
5. once the child has exited (or timed out), kills the child's process group, keeps whatever record
   lines had arrived, and prints ONE JSON document, with the nonce, on its own stdout, which no
   child inherits.

The records are relayed as raw lines: lego validates them (:func:`lego.sandboxes.grading.verdict`).
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

_PR_SET_DUMPABLE = 4
_OUTPUT_TAIL = 8000
_MAX_RECORD_BYTES = 4 * 1024 * 1024


def _apply(patch: str, repo: str) -> str | None:
    """Apply ``patch`` with git in ``repo``; None on success, else git's error."""
    if not os.path.getsize(patch):
        return None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    run = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "--binary", patch],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    return None if run.returncode == 0 else (run.stderr or run.stdout).strip()[-2000:]


def _add_canaries(repo: str, canaries: dict[str, str]) -> list[str]:
    """Append each canary test to its file; returns the files that were not there."""
    missing = []
    for rel, text in canaries.items():
        path = os.path.join(repo, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            missing.append(rel)
            continue
        with open(path, "rb") as f:
            ends_clean = f.read().endswith(b"\n")
        with open(path, "a") as f:
            f.write(("" if ends_clean else "\n") + text)
    return missing


_COMPARISONS = frozenset(
    {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__instancecheck__"}
)
_VALUE_TYPES = frozenset(
    {"int", "float", "complex", "str", "bytes", "bytearray", "tuple", "list", "dict", "set", "frozenset"}
)


def _constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id in ("True", "False"))


def _constant_body(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> bool:
    """A function that returns the same constant whatever it is given (a docstring aside)."""
    if isinstance(fn, ast.Lambda):
        return _constant(fn.body)
    body = [n for n in fn.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None and _constant(body[0].value)


def _overrides_in(tree: ast.AST) -> set[str]:
    """What in ``tree`` redefines what a comparison means: a builtin value type subclassed with its
    comparisons overridden (``class _Same(int): def __eq__ ...``), a comparison method that returns one
    constant whatever it compares, or a comparison attached by name at run time (setattr / type())."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)} | {
                b.attr for b in node.bases if isinstance(b, ast.Attribute)
            }
            for item in node.body:
                names: list[str] = []
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names = [item.name]
                    constant = _constant_body(item)
                elif isinstance(item, ast.Assign):
                    names = [t.id for t in item.targets if isinstance(t, ast.Name)]
                    constant = isinstance(item.value, ast.Lambda) and _constant_body(item.value)
                for name in (n for n in names if n in _COMPARISONS):
                    if bases & _VALUE_TYPES and name != "__hash__":
                        found.add(f"class {node.name}({', '.join(sorted(bases & _VALUE_TYPES))}) overrides {name}")
                    if constant:
                        found.add(f"{node.name}.{name} returns a constant")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "type"):
            for arg in ast.walk(node):
                if isinstance(arg, ast.Constant) and arg.value in _COMPARISONS:
                    found.add(f"{node.func.id}(...) attaches {arg.value} at run time")
    return found


def _comparison_overrides(repo: str, paths: list[str]) -> set[str]:
    """:func:`_overrides_in` over the named files of ``repo`` (unparsable or absent files add nothing:
    their import fails in the test run itself)."""
    found: set[str] = set()
    for rel in paths:
        path = os.path.join(repo, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read(), filename=rel)
        except (SyntaxError, ValueError):
            continue
        found |= {f"{rel}: {what}" for what in _overrides_in(tree)}
    return found


def _run_child(argv: list[str], env: dict[str, str], cwd: str, timeout: float) -> dict[str, object]:
    out_r, out_w = os.pipe()
    rec_r, rec_w = os.pipe()
    child = subprocess.Popen(
        [*argv[:3], str(rec_w), *argv[3:]],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out_w,
        stderr=out_w,
        pass_fds=(rec_w,),
        start_new_session=True,
    )
    os.close(out_w)
    os.close(rec_w)
    bufs = {out_r: bytearray(), rec_r: bytearray()}
    deadline = time.monotonic() + timeout
    timed_out = False
    open_fds = [out_r, rec_r]
    while child.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if open_fds:
            ready, _, _ = select.select(open_fds, [], [], min(left, 0.05))
        else:
            ready = []
            time.sleep(min(left, 0.01))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk and len(bufs[fd]) < _MAX_RECORD_BYTES:
                bufs[fd] += chunk
            elif not chunk:
                open_fds.remove(fd)
    # The child is gone (or out of time): nothing it left behind gets the last word.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    code = child.wait()
    for fd in list(open_fds):  # whatever was already in the pipes, without waiting for stragglers
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
        "records": bufs[rec_r].decode(errors="replace").splitlines(),
        "output": bufs[out_r][-_OUTPUT_TAIL:].decode(errors="replace"),
    }


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(json.dumps({"status": "grader_error", "error": f"prctl failed: errno {ctypes.get_errno()}"}))
        return
    nonce = os.environ.pop("LEGO_GRADE_NONCE", "")
    work = sys.argv[1]
    with open(os.path.join(work, "plan.json")) as f:
        plan = json.load(f)
    repo = plan["repo"]
    report: dict[str, object] = {"nonce": nonce}
    err = _apply(os.path.join(work, "test.patch"), repo)
    if err is not None:
        report.update(status="test_patch_failed", error=err)
    else:
        report["canary_files_missing"] = _add_canaries(repo, plan["canaries"])
        changed = list(plan["changed"])
        before = _comparison_overrides(repo, changed)
        err = _apply(os.path.join(work, "agent.patch"), repo)
        if err is not None:
            report.update(status="agent_patch_failed", error=err)
        else:
            # Only what the agent's change added counts: the pristine code's own classes are the task's.
            report["comparison_overrides"] = sorted(_comparison_overrides(repo, changed) - before)
            report["status"] = "ran"
            env = {**os.environ, **plan["env"]}  # the nonce is already out of os.environ
            report.update(_run_child(plan["argv"], env, repo, float(plan["timeout"])))
    sys.stdout.write(json.dumps(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
