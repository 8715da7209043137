"""Grading with hidden tests: a verdict that rests on what a cheat cannot know.

``grade(task, diff)`` runs the task's hidden tests against the agent's diff in **two fresh sandboxes**
of the task's pristine repo and environment (never the agent's sandbox), side by side:

1. the diff is filtered by the allow-list of :mod:`lego.sandboxes.guards` (edits of tracked source
   files and new modules in existing packages; never tests, startup configuration, symlinks or
   binaries; what is left out is listed in ``GradeResult.excluded_files``);
2. the hidden test files (the pristine repo's files after the task's ``test_patch``) are read on the
   host and their assertions witnessed and perturbed (:mod:`lego.sandboxes.perturb`): for every
   expected test function with a witnessed assertion, one assertion's expected value is changed in
   one of the two runs, drawn per grade on the host and never written where the code under test can
   read it;
3. in each sandbox the supervisor (:mod:`lego.sandboxes.grade_supervisor`), which gets its whole input
   on stdin and makes itself non-dumpable, applies the hidden ``test_patch`` to the pristine repo (if
   that fails the task is broken: :class:`GradingError`), writes that run's test files, applies the
   filtered diff and runs pytest (:mod:`lego.sandboxes.grade_bootstrap`) with the task's interpreter:
   the repo's import roots first on ``sys.path``, the project's own pristine pytest configuration
   (rootdir, ini options, conftest fixtures, markers), plugin autoload off and the environment's
   declared plugins loaded; it relays the test process's records and prints one report with the
   grade's nonce on its own stdout, which no process of the test run holds;
4. :func:`lego.sandboxes.evidence.judge` decides: reward 1 iff every expected test passed in each run
   where it is unperturbed, and every perturbed test failed at its perturbed assertion in the other,
   with the true value witnessed there. A perturbed assertion that passes, or a witnessed value that
   contradicts a pass, is tampering (``GradeResult.tampered``), reward 0. While the diff passes and some
   FAIL_TO_PASS test's evidence was only its pass/fail bit (a truth assertion, or a value that is no
   plain builtin), another round of two runs with fresh draws follows, up to ``sandbox.verdict_rounds``:
   a cheat that tells the runs apart guesses that bit right with probability 1/2 a round.

When a run shows that the tests could not run at all (no records, collection errors, expected tests
not collected, a pytest usage error, a time-out), the pristine repo is run once with the hidden tests
(cached per task): if it fails the same way the task cannot be graded — :class:`GradingError`,
infrastructure, never the policy's 0; otherwise the diff broke the run, and the 0 is the policy's.

What the verdict rests on, and what it does not: see :mod:`lego.sandboxes.evidence`. Only
pytest-based ``test_cmd``s are graded here; Harbor tasks are graded by their own verifier.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import GradingError, SandboxError
from lego.sandboxes.evidence import Evidence, RunRecords, judge, parse_run
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.guards import filter_diff, patch_paths, split_diff, tracked_files
from lego.sandboxes.perturb import Definitions, FilePlan, find_sites, plan_perturbations, render, test_function
from lego.sandboxes.project_meta import project_metadata
from lego.sandboxes.templates import git
from lego.sandboxes.verifier import grade_verifier, is_harbor
from lego.seams import Sandbox
from lego.types import GradeResult, Task

__all__ = ["RUNS", "grade"]

RUNS = 2
"""Fresh runs per grade: each expected test is perturbed in one and must pass in the other."""

_HERE = Path(__file__).parent
_LAUNCH = 'exec "$1" -I -S -B -c "$2"'
_PRISTINE: dict[str, str | None] = {}  # task fingerprint -> why its pristine run fails (None: it runs)
_PRISTINE_LOCK = threading.Lock()


def _pytest_cmd(task: Task) -> tuple[str, dict[str, str], list[str]]:
    """``task.test_cmd`` as (python, env, extra pytest args); only ``[K=V ...] python -m pytest ...``
    and ``[K=V ...] pytest ...`` are understood, since the grader must run pytest its own way."""
    tokens = shlex.split(task.test_cmd)
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    image_python = task.environment.python if task.environment and task.environment.python.startswith("/") else ""
    if tokens and Path(tokens[0]).name in ("pytest", "py.test"):
        return image_python or "python", env, tokens[1:]
    if len(tokens) >= 3 and "python" in Path(tokens[0]).name and tokens[1:3] == ["-m", "pytest"]:
        return image_python or tokens[0], env, tokens[3:]
    raise GradingError(
        f"task {task.instance_id}: test_cmd {task.test_cmd!r} is not `python -m pytest ...` or `pytest ...`; "
        "lego grades pytest tasks only"
    )


def _test_files(task: Task, sb: Sandbox, tracked: dict[str, str], names: list[str]) -> dict[str, str]:
    """The ``.py`` files holding the expected tests, as they read after the hidden ``test_patch``: read
    from the pristine grading sandbox (image tasks have their repo only there) and patched on the host."""
    hidden = {p for fp in split_diff(task.test_patch) for p in fp.paths[-1:] if p.endswith(".py")}
    named = {test_function(n)[0] for n in names if test_function(n)[0].endswith(".py")}
    wanted = sorted(hidden | (named & set(tracked)))
    if not wanted:
        return {}
    with tempfile.TemporaryDirectory(prefix="lego-hidden-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        git(root, "init", "-q")
        for name in wanted:
            if name in tracked:
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(sb.read(name))
        patch = Path(tmp) / "test.patch"
        patch.write_text(task.test_patch)
        if task.test_patch.strip():
            try:
                git(root, "apply", "--whitespace=nowarn", str(patch))
            except SandboxError as exc:
                raise GradingError(
                    f"task {task.instance_id}: the hidden test_patch does not apply to the pristine repo ({exc}); "
                    "rebuild the task"
                ) from exc
        return {n: (root / n).read_text(errors="surrogateescape") for n in wanted if (root / n).is_file()}


def _project_meta(task: Task, sb: Sandbox, tracked: dict[str, str]) -> dict[str, str] | None:
    """The project's own dist-info (:mod:`lego.sandboxes.project_meta`), read from the pristine repo;
    none for an image task, whose image installed the project as its builder chose."""
    if task.image:
        return None

    def read(path: str) -> str | None:
        try:
            return sb.read(path).decode("utf-8", "replace")
        except (SandboxError, OSError):
            return None

    return project_metadata(read, tracked, task.environment.import_roots if task.environment else ["."])


def _argv(
    task: Task, sb: Sandbox, names: list[str], python: str, extra: list[str], meta: dict[str, str] | None
) -> list[str]:
    env = task.environment
    config = {
        "repo": sb.repo_dir,
        "roots": env.import_roots if env else ["."],
        "ids": names,
        "prelude": (_HERE / "suite_profile.py").read_text(),
        "meta": meta,
    }
    files = list(dict.fromkeys(test_function(n)[0] for n in names))
    plugins = [arg for p in (env.plugins if env else []) for arg in ("-p", p)]
    bootstrap = (_HERE / "grade_bootstrap.py").read_text()
    # --tb=line: half the expected tests fail on purpose in each run, and long tracebacks of them cost
    # more than the run itself (455 tests of a real suite: 11.6 s -> 3.5 s)
    opts = ["-p", "no:cacheprovider", f"--rootdir={sb.repo_dir}", f"--confcutdir={sb.repo_dir}", "-q", "--tb=line"]
    return [python, "-I", "-B", "-c", bootstrap, json.dumps(config), *opts, *plugins, *extra, *files]


def _run(
    sb: Sandbox,
    task: Task,
    agent_patch: str,
    files: dict[str, str],
    names: list[str],
    limit: float,
    meta: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One supervised test run in ``sb``: the supervisor's report (``status``, ``records``, ``output``...)."""
    python, env, extra = _pytest_cmd(task)
    nonce = secrets.token_hex(16)
    plan = {
        "nonce": nonce,
        "repo": sb.repo_dir,
        "test_patch": task.test_patch,
        "files": files,
        "agent_patch": agent_patch,
        "argv": _argv(task, sb, names, python, extra, meta),
        "env": {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        "timeout": max(1.0, limit - 5.0),
    }
    supervisor = (_HERE / "grade_supervisor.py").read_text()
    run = sb.exec(
        ["/bin/sh", "-c", _LAUNCH, "grade", python, supervisor], timeout=limit, stdin=json.dumps(plan).encode()
    )
    sb.kill_agent_processes()  # nothing the test run left behind may touch the repo or the report
    try:
        report = json.loads(run.stdout)
    except ValueError:
        report = None
    if isinstance(report, dict) and report.get("status") == "grader_error":
        raise GradingError(f"task {task.instance_id}: the grader could not start: {(run.stderr or run.stdout)[-2000:]}")
    if isinstance(report, dict) and report.get("status") == "test_patch_failed":
        raise GradingError(
            f"task {task.instance_id}: the hidden test_patch does not apply to the pristine repo "
            f"({report.get('error')}); rebuild the task"
        )
    if not isinstance(report, dict) or report.get("nonce") != nonce:
        tail = (run.stdout + run.stderr)[-2000:]
        return {"status": "no_report", "error": f"no report from the grading supervisor [exit {run.exit_code}]: {tail}"}
    return report


def _fingerprint(task: Task, names: list[str]) -> str:
    env = task.environment.model_dump_json() if task.environment else ""
    parts = [task.instance_id, str(task.repo_path), str(task.image), task.test_patch, task.test_cmd, env, *names]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _in_sandboxes(cfg: SandboxConfig, task: Task, runs: int, work: Any) -> list[Any]:
    """``work(r, sandbox)`` for r in range(runs), each in a fresh sandbox created, used and closed by
    its own thread (a local sandbox lives as long as the thread that made it)."""

    def one(r: int) -> Any:
        sb = create_sandbox(cfg, task)
        try:
            return work(r, sb)
        finally:
            sb.close()

    with ThreadPoolExecutor(runs) as pool:
        return list(pool.map(one, range(runs)))


def _pristine_failure(task: Task, cfg: SandboxConfig, names: list[str], limit: float) -> str | None:
    """Why the pristine repo with the hidden tests cannot run them (None: it can), once per task."""
    key = _fingerprint(task, names)
    with _PRISTINE_LOCK:
        if key in _PRISTINE:
            return _PRISTINE[key]

    def work(_: int, sb: Sandbox) -> str | None:
        tracked = tracked_files(sb)
        plans = [FilePlan(p, t, find_sites(t, p)) for p, t in _test_files(task, sb, tracked, names).items()]
        plan_perturbations(plans, set(), 1)
        meta = _project_meta(task, sb, tracked)
        report = _run(sb, task, "", {p.path: render(p, -1) for p in plans}, names, limit, meta)
        ev = _evidence(report_list=[report], names=names, plans=plans)
        return "; ".join(ev.ungradable) + _log([report])[-3000:] if ev.ungradable else None

    why = _in_sandboxes(cfg, task, 1, work)[0]
    with _PRISTINE_LOCK:
        _PRISTINE[key] = why
    return why


def _evidence(report_list: list[dict[str, Any]], names: list[str], plans: list[FilePlan]) -> Evidence:
    runs = [parse_run(list(r.get("records") or [])) if r.get("status") == "ran" else RunRecords() for r in report_list]
    ev = judge(names, plans, runs, [int(r.get("exit_code", -1)) for r in report_list])
    for r, report in enumerate(report_list):
        if report.get("status") == "agent_patch_failed":
            ev.failures.append(f"the agent's diff does not apply: {report.get('error')}")
            ev.ungradable = []
        elif report.get("status") == "no_report":
            ev.failures.append(str(report.get("error")))
        elif report.get("timed_out"):
            ev.ungradable.append(f"run {r}: the test run timed out")
    return ev


def _log(reports: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"[run {r}: {rep.get('status')}, exit {rep.get('exit_code')}]\n{rep.get('output', rep.get('error', ''))}"
        for r, rep in enumerate(reports)
    )


def grade(task: Task, diff: str, *, cfg: SandboxConfig | None = None, timeout: float | None = None) -> GradeResult:
    """Grade ``diff`` against ``task``'s hidden tests (see module doc).

    ``cfg`` picks the backend and limits (default: a local sandbox with default limits);
    ``timeout`` bounds each test run (default: ``cfg.command_timeout_s``). Raises
    :class:`GradingError` when the task itself cannot be graded."""
    if is_harbor(task):  # a Harbor task is graded by its own verifier (lego.sandboxes.verifier)
        return grade_verifier(task, diff, cfg=cfg, timeout=timeout)
    cfg = cfg or SandboxConfig()
    limit = timeout if timeout is not None else cfg.command_timeout_s
    t0 = time.monotonic()
    names = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    if not names:
        raise GradingError(f"task {task.instance_id} names no FAIL_TO_PASS/PASS_TO_PASS tests; rebuild the task")
    rounds: list[tuple[list[dict[str, Any]], Evidence]] = []
    for _ in range(cfg.verdict_rounds):
        reports, ev, excluded = _round(task, diff, cfg, names, limit)
        if ev.ungradable:
            why = _pristine_failure(task, cfg, names, limit)
            if why is not None:
                raise GradingError(
                    f"task {task.instance_id} cannot be graded: its pristine repo does not run the hidden tests: {why}"
                )
            ev.failures += ev.ungradable
        rounds.append((reports, ev))
        passing = not ev.tampered and not ev.failures and all(o == "passed" for o in ev.tests.values())
        if not passing or not set(ev.bit_only) & set(task.FAIL_TO_PASS):
            break
    return _result(task, names, rounds, excluded, time.monotonic() - t0)


def _round(
    task: Task, diff: str, cfg: SandboxConfig, names: list[str], limit: float
) -> tuple[list[dict[str, Any]], Evidence, list[str]]:
    """One round: the two runs side by side, with fresh draws; their reports, the evidence, what the
    allow-list left out of the diff."""
    ready = threading.Event()
    shared: dict[str, Any] = {}

    def work(r: int, sb: Sandbox) -> dict[str, Any]:
        if r == 0:  # the first sandbox, still pristine, gives the file list and the hidden test files
            try:
                tracked = tracked_files(sb)
                shared["kept"], shared["excluded"] = filter_diff(diff, tracked, protected=patch_paths(task.test_patch))
                plans = [FilePlan(p, t, find_sites(t, p)) for p, t in _test_files(task, sb, tracked, names).items()]
                defs = Definitions(plans)
                plan_perturbations(plans, {f for f in map(defs, names) if not defs.shared(f)}, RUNS)
                shared["meta"] = _project_meta(task, sb, tracked)
                shared["plans"] = plans
            finally:
                ready.set()
        elif not ready.wait(timeout=limit):
            raise GradingError(f"task {task.instance_id}: the first grading sandbox did not start in {limit:.0f}s")
        if "plans" not in shared:
            return {"status": "skipped"}
        files = {p.path: render(p, r) for p in shared["plans"]}
        return _run(sb, task, shared["kept"], files, names, limit, shared["meta"])

    reports = _in_sandboxes(cfg, task, RUNS, work)
    return reports, _evidence(reports, names, shared["plans"]), shared["excluded"]


def _result(
    task: Task, names: list[str], rounds: list[tuple[list[dict[str, Any]], Evidence]], excluded: list[str], wall: float
) -> GradeResult:
    """The grade from its rounds: the last round decides (earlier ones passed), the log shows them all."""
    ev = rounds[-1][1]
    log = [f"excluded from the graded diff: {', '.join(excluded)}"] if excluded else []
    for k, (round_reports, _) in enumerate(rounds):
        log += [f"== round {k + 1} of {len(rounds)}", _log(round_reports)]
    not_passing = [f"{t} {o}" for t, o in ev.tests.items() if o != "passed"]
    if not_passing:
        ev.failures.append(f"{len(not_passing)} expected test(s) not passing: {', '.join(not_passing[:5])}")
    log += [f"tampered: {t}" for t in ev.tampered] + [f"reward 0: {f}" for f in ev.failures] + ev.notes
    log.append(
        f"evidence: {ev.perturbed} of {len(names)} expected tests perturbed, {ev.witnessed} witnessed, "
        f"{len(rounds)} round(s)"
    )
    resolved = not ev.tampered and not ev.failures and all(o == "passed" for o in ev.tests.values())
    return GradeResult(
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        tests=ev.tests,
        excluded_files=excluded,
        tampered=ev.tampered,
        log="\n".join(log)[-20000:],
        duration_s=wall,
        perturbed=ev.perturbed,
        witnessed=ev.witnessed,
    )
