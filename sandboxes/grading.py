"""Grading with hidden tests: a verdict that rests on what the graded process never holds.

``grade(task, diff)`` runs the task's hidden tests against the agent's diff in **two fresh sandboxes**
of the task's pristine repo and environment (never the agent's sandbox), side by side:

1. the diff is filtered by the allow-list of :mod:`lego.sandboxes.guards` (edits of tracked source
   files and new modules in existing packages; never tests, startup configuration, symlinks or
   binaries; what is left out is listed in ``GradeResult.excluded_files``);
2. the hidden test files (the pristine repo's files after the task's ``test_patch``) are read on the
   host, which writes their **blind copy** (:mod:`lego.sandboxes.blind`): the same tests on the same
   inputs, every assertion replaced by a witness of what it looks at, no expected value, exception
   type, pattern, id, test name or docstring left in it;
3. in each sandbox the supervisor (:mod:`lego.sandboxes.grade_supervisor`), which gets its whole input
   on stdin and makes itself non-dumpable, applies the hidden ``test_patch`` to the pristine repo (if
   that fails the task is broken: :class:`GradingError`), writes the blind copy (second run only),
   applies the filtered diff and runs pytest (:mod:`lego.sandboxes.grade_bootstrap`) with the task's
   interpreter: the repo's import roots first on ``sys.path``, the project's own pristine pytest
   configuration (rootdir, ini options, conftest fixtures, markers), plugin autoload off and the
   environment's declared plugins loaded; it relays the test process's records and prints one report
   with the grade's nonce on its own stdout, which no process of the test run holds;
4. :func:`lego.sandboxes.evidence.judge` decides: reward 1 iff every expected test passes **as
   written**, and in the **blind copy** each of its witnessed assertions holds: evaluated on the host
   with the expected value the host kept (plain builtin values, read structurally, never through the
   value's own methods), or, where only the project's code could say, equal to the **reference**: the
   gold patch's witnesses on the same copy (two gold runs, once per task, cached under the cache
   directory; a witness the two runs disagree on is dropped and counted). A test that passes as
   written but not blind, or a result record written twice, is tampering (``GradeResult.tampered``).

``GradeResult.behavioural`` / ``bit_only`` count the FAIL_TO_PASS tests that rest on witnessed
behaviour and those that rest on a reported pass/fail bit alone (nothing witnessed). A task without a
gold patch is judged blind only where the host can evaluate an assertion, and the log says so.

When a run shows that the tests could not run at all (no records, collection errors, expected tests
not collected, a pytest usage error, a time-out), the pristine repo is run once with the hidden tests
(cached per task): if it fails the same way the task cannot be graded — :class:`GradingError`,
infrastructure, never the policy's 0; otherwise the diff broke the run, and the 0 is the policy's. A
gold patch that does not pass the hidden tests as written is a broken task too (:class:`GradingError`).

Only pytest-based ``test_cmd``s are graded here; Harbor tasks are graded by their own verifier.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import GradingError, SandboxError
from lego.io import atomic_write_text
from lego.paths import cache_dir
from lego.sandboxes.blind import BlindPlan, blind_copy, test_function
from lego.sandboxes.evidence import Evidence, Reference, RunRecords, judge, match_ids, parse_run, reference
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.guards import filter_diff, patch_paths, split_diff, tracked_files
from lego.sandboxes.project_meta import project_metadata
from lego.sandboxes.templates import git
from lego.sandboxes.verifier import grade_verifier, is_harbor
from lego.seams import Sandbox
from lego.types import GradeResult, Task

__all__ = ["RUNS", "behavioural_evidence", "forget_reference", "grade", "reference_path"]

RUNS = 2
"""Fresh runs per grade: the hidden tests as written, and their blind copy."""

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


def _test_module(path: str) -> bool:
    """Whether ``path`` is test code by its name: a test module, a conftest, or a module of a test directory."""
    parts = Path(path).parts
    name = parts[-1]
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or any(p in ("test", "tests", "testing") for p in parts[:-1])
    )


def _test_files(task: Task, sb: Sandbox, tracked: dict[str, str], names: list[str]) -> dict[str, str]:
    """The ``.py`` files holding the expected tests, as they read after the hidden ``test_patch``: read
    from the pristine grading sandbox (image tasks have their repo only there) and patched on the host."""
    hidden = {p for fp in split_diff(task.test_patch) for p in fp.paths[-1:] if p.endswith(".py")}
    named = {test_function(n)[0] for n in names if test_function(n)[0].endswith(".py")}
    # and the modules beside them (a mixin class in tests/__init__.py, a helper that asserts): the checks
    # an expected test runs may live there, and a check left as written shows the graded process its answer
    dirs = {str(Path(p).parent) for p in hidden | named}
    siblings = {p for p in tracked if p.endswith(".py") and str(Path(p).parent) in dirs}
    # never a module of the code under test (a doctest id names one: iso8601/iso8601.py): the agent's
    # diff applies to it as written
    wanted = sorted(hidden | {p for p in (named | siblings) & set(tracked) if _test_module(p)})
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
    task: Task,
    sb: Sandbox,
    names: list[str],
    python: str,
    extra: list[str],
    meta: dict[str, str] | None,
    select: dict[str, Any] | None = None,
) -> list[str]:
    env = task.environment
    config = {
        "repo": sb.repo_dir,
        "roots": env.import_roots if env else ["."],
        # a blind run is told which instances to keep by position: the ids as written spell a table's values
        "ids": [] if select else names,
        "prelude": (_HERE / "suite_profile.py").read_text(),
        "meta": meta,
        **(select or {}),
    }
    files = list(dict.fromkeys(test_function(n)[0] for n in names))
    plugins = [arg for p in (env.plugins if env else []) for arg in ("-p", p)]
    bootstrap = (_HERE / "grade_bootstrap.py").read_text()
    # --tb=line: half the expected tests fail on purpose in each run, and long tracebacks of them cost
    # more than the run itself (455 tests of a real suite: 11.6 s -> 3.5 s)
    opts = ["-p", "no:cacheprovider", f"--rootdir={sb.repo_dir}", f"--confcutdir={sb.repo_dir}", "-q", "--tb=line"]
    # not -I: it would ignore PYTHONHASHSEED, and every run would order a set of strings its own way (a
    # parametrize table that is a set collects its rows in another order in each run). -s is the part
    # of -I kept: the supervisor gives the run no PYTHON* variable but the grader's own, and the
    # bootstrap drops the working directory from sys.path itself.
    return [python, "-s", "-B", "-c", bootstrap, json.dumps(config), *opts, *plugins, *extra, *files]


def _run(
    sb: Sandbox,
    task: Task,
    agent_patch: str,
    files: dict[str, str],
    names: list[str],
    limit: float,
    meta: dict[str, str] | None = None,
    select: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One supervised test run in ``sb``: the supervisor's report (``status``, ``records``, ``output``...).
    ``names`` are the expected ids (their files are the ones pytest is given); ``select`` says which
    instances of a blind copy run (``positions`` or ``functions``; none: exactly ``names``)."""
    python, env, extra = _pytest_cmd(task)
    nonce = secrets.token_hex(16)
    plan = {
        "nonce": nonce,
        "repo": sb.repo_dir,
        "test_patch": task.test_patch,
        "files": files,
        "agent_patch": agent_patch,
        "argv": _argv(task, sb, names, python, extra, meta, select),
        # one hash seed for every run: a list made from a set of strings comes out in one order in the
        # gold patch's runs and the agent's (the random module is seeded per test by the bootstrap)
        "env": {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"},
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
    """Why the pristine repo with the hidden tests as written cannot run them (None: it can), once per task."""
    key = _fingerprint(task, names)
    with _PRISTINE_LOCK:
        if key in _PRISTINE:
            return _PRISTINE[key]

    def work(_: int, sb: Sandbox) -> str | None:
        report = _run(sb, task, "", {}, names, limit, _project_meta(task, sb, tracked_files(sb)))
        why = _ungradable(report, names)
        return "; ".join(why) + _log([report])[-3000:] if why else None

    why = _in_sandboxes(cfg, task, 1, work)[0]
    with _PRISTINE_LOCK:
        _PRISTINE[key] = why
    return why


def _records(report: dict[str, Any]) -> RunRecords:
    return parse_run(list(report.get("records") or [])) if report.get("status") == "ran" else RunRecords()


def _ungradable(report: dict[str, Any], names: list[str]) -> list[str]:
    """Why a run as written did not run the expected tests at all ([] when it did)."""
    run = _records(report)
    why = []
    if not run.started:
        why.append("the test process sent no records (it died before pytest started)")
    if run.collect_errors:
        why.append("collection errors: " + " | ".join(run.collect_errors)[:2000])
    if run.exitstatus not in (0, 1) or int(report.get("exit_code", -1)) not in (0, 1):
        why.append(f"pytest exited {report.get('exit_code')} (status {run.exitstatus})")
    matched = match_ids(names, run.collected or [])
    lacking = [t for t in names if t not in matched]
    if lacking:
        why.append(f"{len(lacking)} expected test(s) not collected, e.g. {lacking[0]}")
    if report.get("timed_out"):
        why.append("the test run timed out")
    return why


def _log(reports: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"[{_RUN_NAMES[r] if r < len(_RUN_NAMES) else r}: {rep.get('status')}, exit {rep.get('exit_code')}]\n"
        f"{rep.get('output', rep.get('error', ''))}"
        for r, rep in enumerate(reports)
    )


_RUN_NAMES = ("as written", "blind copy")


@dataclass
class _Prepared:
    """What the first, still pristine, grading sandbox gives a grade: the kept diff, the hidden files."""

    kept: str
    excluded: list[str]
    plan: BlindPlan
    meta: dict[str, str] | None


def _prepare(task: Task, sb: Sandbox, diff: str, names: list[str]) -> _Prepared:
    tracked = tracked_files(sb)
    kept, excluded = filter_diff(diff, tracked, protected=patch_paths(task.test_patch))
    plan = blind_copy(_test_files(task, sb, tracked, names))
    return _Prepared(kept, excluded, plan, _project_meta(task, sb, tracked))


def _blind_select(plan: BlindPlan, names: list[str], order: list[str] | None) -> dict[str, Any]:
    """Which instances the blind run keeps: the expected ones, by their position among their function's
    instances in ``order`` (every id the tests as written collect, in order); with no order, whole
    functions."""
    if order is None:
        return {"functions": list(dict.fromkeys(plan.blind_node(n) for n in names))}
    matched = match_ids(names, order)
    positions: dict[str, list[int]] = {}
    by_node: dict[str, list[str]] = {}
    for nodeid in order:
        by_node.setdefault(nodeid.split(" ", 1)[0].split("[", 1)[0], []).append(nodeid)
    for test in names:
        if test in matched:
            node = matched[test].split(" ", 1)[0].split("[", 1)[0]
            positions.setdefault(plan.blind_node(node), []).append(by_node[node].index(matched[test]))
    return {"positions": positions}


_REFERENCES: dict[str, Reference | None] = {}
_REFERENCE_LOCK = threading.Lock()
_VERSION = hashlib.sha256(
    b"".join((_HERE / f).read_bytes() for f in ("blind.py", "grade_bootstrap.py", "evidence.py", "grade_supervisor.py", "grading.py"))
).hexdigest()[:12]


def reference_path(task: Task, names: list[str]) -> tuple[str, Path]:
    """The cache key of ``task``'s reference and the host-only file it is kept in: the task's record,
    its gold patch and this grader's code (a change to the blind copy makes a new reference)."""
    gold = hashlib.sha256(task.patch.encode()).hexdigest()
    key = hashlib.sha256(f"{_fingerprint(task, names)}:{gold}:{_VERSION}".encode()).hexdigest()
    return key, cache_dir() / "references" / f"{key[:32]}.json"


def forget_reference(task: Task) -> None:
    """Drop ``task``'s cached reference (memory and disk): the next grade builds it again."""
    names = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    key, path = reference_path(task, names)
    with _REFERENCE_LOCK:
        _REFERENCES.pop(key, None)
    path.unlink(missing_ok=True)


def _reference(task: Task, cfg: SandboxConfig, names: list[str], limit: float) -> Reference | None:
    """The gold patch's behaviour on the blind copy (:class:`Reference`), computed once per task and
    kept under the cache directory (host-only); None for a task without a gold patch."""
    if not task.patch.strip():
        return None
    key, path = reference_path(task, names)
    with _REFERENCE_LOCK:
        if key in _REFERENCES:
            return _REFERENCES[key]
    if path.is_file():
        try:
            ref = Reference.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            ref = None
        else:
            with _REFERENCE_LOCK:
                _REFERENCES[key] = ref
            return ref
    shared: dict[str, Any] = {}

    def as_written(_: int, sb: Sandbox) -> dict[str, Any]:
        shared["prepared"] = prep = _prepare(task, sb, task.patch, names)
        return _run(sb, task, prep.kept, {}, names, limit, prep.meta)

    def blind(_: int, sb: Sandbox) -> dict[str, Any]:
        prep: _Prepared = shared["prepared"]
        return _run(sb, task, prep.kept, prep.plan.texts, names, limit, prep.meta, shared["select"])

    # first as written (the order its instances are collected in says which blind ones to keep), then
    # the blind copy twice side by side
    reports = _in_sandboxes(cfg, task, 1, as_written)
    real = _records(reports[0])
    shared["select"] = _blind_select(shared["prepared"].plan, names, real.everything or real.collected or [])
    reports += _in_sandboxes(cfg, task, 2, blind)
    why = _ungradable(reports[0], names)
    matched = match_ids(names, real.collected or [])
    failing = [t for t in names if t in matched and real.outcome.get(matched[t]) != "passed"]
    if why or failing:
        detail = "; ".join(why) or f"{len(failing)} expected test(s) fail with it, e.g. {failing[0]}"
        raise GradingError(
            f"task {task.instance_id} cannot be graded: the gold patch does not pass the hidden tests as written ({detail}): the task "
            f"is broken or flaky; validate it with `lego tasks validate`\n{_log(reports[:1])[-3000:]}"
        )
    blinds = [_records(r) for r in reports[1:]]
    ref = reference(real, blinds)
    gold = judge(names, shared["prepared"].plan, real, blinds[0], ref, [0, 0], set(task.FAIL_TO_PASS))
    ref.evidence = {t: t in gold.behavioural for t in task.FAIL_TO_PASS}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(ref.to_json()))
    with _REFERENCE_LOCK:
        _REFERENCES[key] = ref
    return ref


def behavioural_evidence(task: Task, cfg: SandboxConfig | None = None) -> float | None:
    """The share of ``task``'s FAIL_TO_PASS tests whose verdict rests on witnessed behaviour rather than
    a reported pass/fail bit, from its reference (computed once, then cached); None for a task without
    a gold patch or with its own verifier, whose evidence is not known."""
    if is_harbor(task) or not task.patch.strip():
        return None
    cfg = cfg or SandboxConfig()
    names = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    ref = _reference(task, cfg, names, cfg.command_timeout_s)
    return ref.share if ref is not None else None


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
    ref = _reference(task, cfg, names, limit)
    reports, prep = _runs(task, diff, cfg, names, limit, ref.real if ref is not None else None)
    ev = judge(
        names, prep.plan, _records(reports[0]), _records(reports[1]), ref,
        [int(r.get("exit_code", -1)) for r in reports], set(task.FAIL_TO_PASS),
    )  # fmt: skip
    for r, report in enumerate(reports):
        if report.get("status") == "agent_patch_failed":
            ev.failures.append(f"the agent's diff does not apply: {report.get('error')}")
            ev.ungradable = []
            break
        if report.get("status") == "no_report":
            ev.failures.append(str(report.get("error")))
        elif report.get("timed_out"):
            ev.ungradable.append(f"{_RUN_NAMES[r]} run: the test run timed out")
    if ev.ungradable:
        why = _pristine_failure(task, cfg, names, limit)
        if why is not None:
            raise GradingError(
                f"task {task.instance_id} cannot be graded: its pristine repo does not run the hidden tests: {why}"
            )
        ev.failures += ev.ungradable
    if ref is None:
        ev.notes.append("no gold patch: the blind copy is judged only where the host can evaluate an assertion")
    return _result(names, reports, ev, prep, time.monotonic() - t0)


def _runs(
    task: Task, diff: str, cfg: SandboxConfig, names: list[str], limit: float, order: list[str] | None
) -> tuple[list[dict[str, Any]], _Prepared]:
    """The grade's two runs side by side: the hidden tests as written, and their blind copy."""
    ready = threading.Event()
    shared: dict[str, Any] = {}

    def work(r: int, sb: Sandbox) -> dict[str, Any]:
        if r == 0:  # the first sandbox, still pristine, gives the file list and the hidden test files
            try:
                shared["prepared"] = _prepare(task, sb, diff, names)
            finally:
                ready.set()
        elif not ready.wait(timeout=limit):
            raise GradingError(f"task {task.instance_id}: the first grading sandbox did not start in {limit:.0f}s")
        if "prepared" not in shared:
            return {"status": "skipped"}
        prep: _Prepared = shared["prepared"]
        if r == 0:
            return _run(sb, task, prep.kept, {}, names, limit, prep.meta)
        select = _blind_select(prep.plan, names, order)
        return _run(sb, task, prep.kept, prep.plan.texts, names, limit, prep.meta, select)

    reports = _in_sandboxes(cfg, task, RUNS, work)
    return reports, shared["prepared"]


def _result(names: list[str], reports: list[dict[str, Any]], ev: Evidence, prep: _Prepared, wall: float) -> GradeResult:
    log = [f"excluded from the graded diff: {', '.join(prep.excluded)}"] if prep.excluded else []
    log.append(_log(reports))
    not_passing = [f"{t} {o}" for t, o in ev.tests.items() if o != "passed"]
    if not_passing:
        ev.failures.append(f"{len(not_passing)} expected test(s) not passing: {', '.join(not_passing[:5])}")
    log += [f"tampered: {t}" for t in ev.tampered] + [f"reward 0: {f}" for f in ev.failures] + ev.notes
    log.append(
        f"evidence: {len(ev.behavioural)} FAIL_TO_PASS test(s) judged on behaviour, {len(ev.bit_only)} on a "
        f"pass/fail bit alone; {ev.unstable} unstable reference witness(es) dropped"
    )
    resolved = not ev.tampered and not ev.failures and all(o == "passed" for o in ev.tests.values())
    return GradeResult(
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        tests=ev.tests,
        excluded_files=prep.excluded,
        tampered=ev.tampered,
        log="\n".join(log)[-20000:],
        duration_s=wall,
        behavioural=len(ev.behavioural),
        bit_only=len(ev.bit_only),
        unstable=ev.unstable,
    )
