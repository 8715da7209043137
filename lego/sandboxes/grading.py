"""Grading with hidden tests: a reward the code under test cannot write.

``grade(task, diff)`` creates a *fresh* sandbox from the task's pristine repo (never the agent's),
and in it:

1. lists the pristine repo's files (``git ls-files -s``) and keeps only the part of the agent's diff
   the allow-list in :mod:`lego.sandboxes.guards` accepts (edits of tracked source files, new modules in
   existing packages; never tests, startup configuration, symlinks or binaries). The rest is listed
   in ``GradeResult.excluded_files``;
2. runs the grading supervisor (:mod:`lego.sandboxes.grade_supervisor`), a stdlib-only process that makes
   itself non-dumpable, applies the hidden ``test_patch`` to the *pristine* repo (if that fails the
   task is broken: :class:`GradingError`; the agent's diff cannot cause it), appends **canary** tests
   with unpredictable names whose bodies must fail, applies the filtered diff, and runs pytest
   (:mod:`lego.sandboxes.grade_bootstrap`) as its child: ``python -I`` with the repo at the END of
   ``sys.path``, ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, ``-p no:cacheprovider``, ``--rootdir`` and
   ``--confcutdir`` pinned to the repo, the reporter an anonymous plugin object, and an audit hook
   installed before anything else;
3. reads the supervisor's one JSON report, carrying the per-grade nonce, from the exec's stdout
   (which no process of the test run holds), kills everything left in the grading sandbox, and
   judges the relayed record stream with :func:`verdict`.

What the grader trusts: the pristine repo and the task's test patch, the runtime's pytest, and the
supervisor's stdout. What it does not trust: anything the agent wrote, and anything the test run
reports: a stream that is malformed, out of pytest's protocol order, cut short, or followed by more
records zeroes the reward; so does a collected set that is not exactly FAIL_TO_PASS + PASS_TO_PASS +
the canaries. Tampering that is certain (a canary reported passed or failing without its token,
pytest's objects patched, a foreign hook implementation, an audit event no honest run raises) is
listed in ``GradeResult.tampered`` and the reward is 0 whatever the tests say. The reward is 1 iff
nothing zeroed it and every named test passed (setup, call and teardown).

Not closed, and why: the code under test shares the reporter's process, so a patch crafted against
this grader can in principle forge a consistent stream (detection raises the cost; it cannot make it
impossible without a second interpreter). What a comparison means is checked statically, before
any of the agent's code runs: the supervisor parses the Python files the applied diff changed and
reports what the change added that redefines comparison (a builtin value type subclassed with
``__eq__``/``__lt__``/... overridden, a comparison method returning one constant, a comparison
attached by name with ``setattr``/``type()``); that is tampering. A comparison redefined in a way this
reading does not recognise (e.g. built from strings at run time) is not caught. Only pytest-based
``test_cmd``s are supported. The same diff grades the same twice (canary names and tokens are random,
but whether a canary fails is not). Tested by tests/sandboxes/test_grader_attacks.py (each attack
through a real sandbox and this function) and tests/sandboxes/test_grading.py.
"""

from __future__ import annotations

import io
import json
import secrets
import shlex
import tarfile
import time
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import GradingError
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.guards import filter_diff, patch_paths
from lego.seams import Sandbox
from lego.types import GradeResult, Task

__all__ = ["Verdict", "grade", "grade_in", "verdict"]

_HERE = Path(__file__).parent
_SETUP_FAILED = 92
_SCRIPT = """set -u
W=$1; P=$2
mkdir -p "$W" && tar -xf "$W.tar" -C "$W" && rm -f "$W.tar" || exit 92
exec "$P" -I -S -B "$W/supervisor.py" "$W"
"""
_WHENS = ("setup", "call", "teardown")
_OUTCOMES = ("passed", "failed", "skipped")


def _pytest_cmd(task: Task) -> tuple[str, dict[str, str], list[str]]:
    """``task.test_cmd`` as (python, env, extra pytest args); only ``[K=V ...] python -m pytest ...``
    and ``[K=V ...] pytest ...`` are understood, since the grader must run pytest its own way."""
    tokens = shlex.split(task.test_cmd)
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    if tokens and Path(tokens[0]).name in ("pytest", "py.test"):
        return "python", env, tokens[1:]
    if len(tokens) >= 3 and "python" in Path(tokens[0]).name and tokens[1:3] == ["-m", "pytest"]:
        return tokens[0], env, tokens[3:]
    raise GradingError(
        f"task {task.instance_id}: test_cmd {task.test_cmd!r} is not `python -m pytest ...` or `pytest ...`; "
        "lego grades pytest tasks only"
    )


def _canaries(names: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """One canary test per hidden test file: ``({file: code to append}, {canary node id: token})``.

    Named after a real test of its file plus random hex, so neither its name nor its file marks it;
    its body fails with ``token`` in the message, so a run that reports it passed, or failed without
    the token, forged its results."""
    files: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for name in names:
        path = name.split("::")[0]
        if not path.endswith(".py") or path in files:
            continue
        base = name.split("::")[-1].split("[")[0]
        canary = f"{base}_{secrets.token_hex(3)}"
        token = secrets.token_hex(12)
        a, b = 101 + secrets.randbelow(800), 101 + secrets.randbelow(800)
        files[path] = f"\n\ndef {canary}():\n    value = {a} * {b}\n    assert value == {a * b + 1}, {token!r}\n"
        tokens[f"{path}::{canary}"] = token
    return files, tokens


def _bundle(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tracked(sb: Sandbox) -> dict[str, str]:
    """``{path: git mode}`` of every file in the (still pristine) grading sandbox's repo."""
    run = sb.exec(["git", "ls-files", "-s", "-z"], env={"GIT_CONFIG_GLOBAL": "/dev/null"}, timeout=60)
    if run.exit_code != 0:
        raise GradingError(f"cannot list the pristine repo's files: {run.stderr.strip()}")
    out = {}
    for entry in run.stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        if path:
            out[path] = meta.split(" ")[0]
    return out


class Verdict:
    """What a record stream shows: per-test outcomes, certain tampering, other reasons for reward 0."""

    def __init__(self, names: list[str]) -> None:
        self.tests: dict[str, str] = {n: "missing" for n in names}
        self.tampered: list[str] = []
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.exitstatus: int | None = None


def verdict(records: list[str], names: list[str], canaries: dict[str, str], exit_code: int) -> Verdict:
    """Judge the reporter's records (see :mod:`lego.sandboxes.grade_bootstrap` for their order).

    ``names``: the expected tests; ``canaries``: canary node id -> token; ``exit_code``: the pytest
    process's. Fail closed: a test without a complete passing setup/call/teardown is not passed."""
    v = Verdict(names)
    outcome: dict[str, str] = {}
    stages: dict[str, list[tuple[str, str]]] = {}
    messages: dict[str, str] = {}
    collected: list[str] | None = None
    position = 0
    finished = False
    parsed: list[dict[str, Any]] = []
    for line in records:
        try:
            rec = json.loads(line)
        except ValueError:
            v.tampered.append(f"malformed record {line[:80]!r}")
            break
        if not isinstance(rec, dict):
            v.tampered.append(f"malformed record {line[:80]!r}")
            break
        parsed.append(rec)
    if not parsed or parsed[0].get("k") != "hello":
        v.failures.append("the test run sent no records (it died before pytest started)")
    for rec in parsed[1:]:
        kind = rec.get("k")
        if finished:
            v.tampered.append(f"record after the run finished: {kind!r}")
            break
        if kind == "audit":
            (v.tampered if rec.get("certain") else v.notes).append(f"audit event: {rec.get('event')}")
        elif kind == "collect_error":
            v.notes.append(f"collection error in {rec.get('id')}: {str(rec.get('msg'))[-300:]}")
        elif kind == "collected":
            ids = rec.get("ids")
            if collected is not None or not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                v.tampered.append("a second or malformed collection record")
                break
            collected = ids
        elif kind == "report":
            test, when, result = rec.get("id"), rec.get("when"), rec.get("outcome")
            if collected is None or test not in collected or when not in _WHENS or result not in _OUTCOMES:
                v.tampered.append(f"report out of protocol: {str(test)[:120]} {when} {result}")
                break
            assert isinstance(test, str) and isinstance(when, str) and isinstance(result, str)
            done = stages.setdefault(test, [])
            if not done:
                expected_next = collected[position] if position < len(collected) else None
                if when != "setup" or test != expected_next:
                    v.tampered.append(f"report out of protocol order: {test} {when}")
                    break
                position += 1
            elif done[-1][0] == "teardown" or (when == "call" and done != [("setup", "passed")]):
                v.tampered.append(f"report out of protocol order: {test} {when}")
                break
            elif when == "setup" or (when == "teardown" and done[-1][0] == "setup" and done[0][1] == "passed"):
                v.tampered.append(f"report out of protocol order: {test} {when}")
                break
            done.append((when, result))
            if when == "call" and result == "failed":
                messages[test] = str(rec.get("msg", ""))
        elif kind == "integrity":
            v.tampered.extend(f"integrity: {p}" for p in rec.get("problems") or ["unspecified"])
        elif kind == "finish":
            finished = True
            status = rec.get("exitstatus")
            v.exitstatus = status if isinstance(status, int) else None
        else:
            v.tampered.append(f"unknown or repeated record {str(kind)[:40]!r}")
            break
    for test, done in stages.items():
        if not done or done[-1][0] != "teardown":
            outcome[test] = "missing"  # the run ended inside this test
        elif done[0][1] != "passed":
            outcome[test] = "error" if done[0][1] == "failed" else "skipped"
        elif done[-1][1] == "failed":
            outcome[test] = "error"
        else:
            outcome[test] = "skipped" if done[1][1] == "skipped" else done[1][1]
    for n in names:
        v.tests[n] = outcome.get(n, "missing")
    for cid, token in canaries.items():
        got = outcome.get(cid, "missing")
        if got == "passed":
            v.tampered.append(f"canary {cid} reported passed")
        elif got == "failed" and token not in messages.get(cid, ""):
            v.tampered.append(f"canary {cid} failed without its token")
        elif got != "failed":
            v.failures.append(f"canary {cid}: {got}")
    wanted = set(names) | set(canaries)
    if collected is None:
        v.failures.append("pytest collected nothing")
    elif set(collected) != wanted or len(collected) != len(set(collected)):
        extra = sorted(set(collected) - wanted)[:10]
        lacking = sorted(wanted - set(collected))[:10]
        v.failures.append(f"collected tests differ from the expected set: extra {extra}, missing {lacking}")
    if not finished:
        v.failures.append("the record stream ended before pytest finished")
    elif v.exitstatus != exit_code:
        v.tampered.append(f"pytest reported exit status {v.exitstatus} but its process exited {exit_code}")
    elif exit_code != (1 if canaries else 0):
        v.failures.append(f"pytest exited {exit_code}")
    return v


def grade_in(sb: Sandbox, task: Task, diff: str, *, timeout: float | None = None) -> GradeResult:
    """Grade ``diff`` inside ``sb``, which must be a fresh sandbox of ``task``'s pristine repo.

    Four sandbox calls: list the pristine files, write one tar (patches, plan, supervisor,
    bootstrap), one exec (the supervisor), then kill whatever the test run left behind."""
    t0 = time.monotonic()
    python, env, extra = _pytest_cmd(task)
    names = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    if not names:
        raise GradingError(f"task {task.instance_id} names no FAIL_TO_PASS/PASS_TO_PASS tests; rebuild the task")
    limit = timeout if timeout is not None else SandboxConfig().command_timeout_s
    kept, excluded = filter_diff(diff, _tracked(sb), protected=patch_paths(task.test_patch))
    canary_files, canaries = _canaries(names)
    work = f"/tmp/lego-grade-{secrets.token_hex(8)}"
    bootstrap = f"{work}/g{secrets.token_hex(6)}.py"
    repo = sb.repo_dir
    argv = [python, "-IB", bootstrap, repo, "-p", "no:cacheprovider", f"--rootdir={repo}", f"--confcutdir={repo}"]
    # Shuffled, so a canary's place on the command line (which the test run can read) does not mark it.
    ids = [*names, *canaries]
    secrets.SystemRandom().shuffle(ids)
    argv += ["-q", *extra, *ids]
    plan = {
        "repo": repo,
        "canaries": canary_files,
        "changed": sorted(p for p in patch_paths(kept) if p.endswith(".py")),
        "argv": argv,
        "env": {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        "timeout": max(1.0, limit - 5.0),
    }
    files = {
        "agent.patch": kept,
        "test.patch": task.test_patch,
        "plan.json": json.dumps(plan),
        "supervisor.py": (_HERE / "grade_supervisor.py").read_text(),
        bootstrap.rsplit("/", 1)[1]: (_HERE / "grade_bootstrap.py").read_text(),
    }
    sb.write(f"{work}.tar", _bundle(files))
    nonce = secrets.token_hex(16)
    run = sb.exec(["/bin/sh", "-c", _SCRIPT, "grade", work, python], env={"LEGO_GRADE_NONCE": nonce}, timeout=limit)
    sb.kill_agent_processes()  # nothing the test run left behind may touch the repo or the report
    log = [f"excluded from the graded diff: {', '.join(excluded)}"] if excluded else []
    try:
        report = json.loads(run.stdout)
    except ValueError:
        report = None
    if run.exit_code == _SETUP_FAILED or (isinstance(report, dict) and report.get("status") == "grader_error"):
        raise GradingError(f"task {task.instance_id}: the grader could not start: {(run.stderr or run.stdout)[-2000:]}")
    if isinstance(report, dict) and report.get("status") == "test_patch_failed":
        raise GradingError(
            f"task {task.instance_id}: the hidden test_patch does not apply to the pristine repo "
            f"({report.get('error')}); rebuild the task"
        )
    v = Verdict(names)
    if not isinstance(report, dict) or report.get("nonce") != nonce:
        tail = (run.stdout + run.stderr)[-2000:]
        v.failures.append(f"no report from the grading supervisor [exit {run.exit_code}]: {tail}")
    elif report.get("status") == "agent_patch_failed":
        v.failures.append(f"the agent's diff does not apply: {report.get('error')}")
    else:
        for path in report.get("canary_files_missing") or []:
            canaries = {c: t for c, t in canaries.items() if not c.startswith(f"{path}::")}
        v = verdict(list(report.get("records") or []), names, canaries, int(report.get("exit_code", -1)))
        v.tampered.extend(f"redefines comparison: {what}" for what in report.get("comparison_overrides") or [])
        log.append(f"$ {shlex.join(argv[4:])}\n[exit {report.get('exit_code')}]\n{report.get('output', '')}")
        if report.get("timed_out"):
            v.failures.append(f"the test run timed out after {plan['timeout']:.0f}s")
    log += [f"tampered: {t}" for t in v.tampered] + [f"reward 0: {f}" for f in v.failures] + v.notes
    resolved = not v.tampered and not v.failures and all(o == "passed" for o in v.tests.values())
    return GradeResult(
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        tests=v.tests,
        excluded_files=excluded,
        tampered=v.tampered,
        log="\n".join(log)[-20000:],
        duration_s=time.monotonic() - t0,
    )


def grade(task: Task, diff: str, *, cfg: SandboxConfig | None = None, timeout: float | None = None) -> GradeResult:
    """Grade ``diff`` against ``task``'s hidden tests in a fresh sandbox (see module doc).

    ``cfg`` picks the backend and limits (default: a local sandbox with default limits);
    ``timeout`` bounds the test run (default: ``cfg.command_timeout_s``).
    """
    cfg = cfg or SandboxConfig()
    t0 = time.monotonic()
    sb = create_sandbox(cfg, task)
    try:
        result = grade_in(sb, task, diff, timeout=timeout if timeout is not None else cfg.command_timeout_s)
    finally:
        sb.close()
    return result.model_copy(update={"duration_s": time.monotonic() - t0})
