"""The task factory: a real project's source distribution -> validated SWE tasks, by SWE-smith's recipe.

No model is involved. For one project (:func:`make_project`):

1. **Prepare** (:func:`prepare_project`): fetch and unpack the sdist (or copy a local checkout's
   tracked files), find its layout, resolve and build its test environment
   (:mod:`lego.tasks.projectenv`, :mod:`lego.tasks.environments`).
2. **Baseline**: run the suite three times from the repo root with the environment's interpreter,
   the way the grader runs it (the project's own pytest configuration, import roots first on
   ``sys.path``, plugin autoload off and the environment's plugins loaded). A test is *stable* when
   it passes all three times in a test file; tests that differ between runs are flaky, tests that
   fail are broken, tests slower than ``slow_test_s`` are slow: none of them is ever used.
3. **Mutate**: procedural AST mutations (:func:`lego.tasks.mutations.find_mutations`, extended
   kinds) over the project's own modules, never its tests, in a seeded order that cycles through
   the kinds, at most ``per_function`` tasks per function.
4. **Validate** each mutant: the suite runs on a copy with the mutation applied; it is kept only
   when at least one stable test goes pass -> fail, every stable test is still collected, the run
   did not time out, and ``confirm_runs`` more runs, each under its own PYTHONHASHSEED as grading
   runs have, give the same result on every stable test. Only a mutant that would be kept pays for
   them. A mutant under which a test depends on chance or on set order (cachetools' RRCache evicts
   a random key: a wrong size computation made a PASS_TO_PASS test fail in some runs only) would
   grade the gold patch 0 now and then; it is dropped as "flaky on the mutant".
5. **Emit**: FAIL_TO_PASS = the stable tests that fail, PASS_TO_PASS = the stable tests that pass
   on the mutant too, ``test_patch`` = the test files holding FAIL_TO_PASS tests (hidden from the
   agent's repo), ``patch`` = the gold fix, the bug report from the observed failures
   (:mod:`lego.tasks.bugreport`), and the recipe that rebuilds the repo (sdist name, version and
   sha256, the mutation): :func:`lego.tasks.realtask.task_record`, which also materialises the repo
   once to fix ``base_commit`` and checks the gold tree is byte-identical to the pristine project.

Mutant runs have a per-test timeout (thread method: a hung mutant ends its run) and a memory cap,
so an infinite loop or a runaway allocation costs one run, not the machine.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from lego.errors import TaskError
from lego.tasks.environments import build_environment, run_suite
from lego.tasks.mutations import Mutation, find_mutations, interleave_kinds
from lego.tasks.projectenv import resolve_environment
from lego.tasks.realrepo import (
    ProjectLayout,
    checkout_tree,
    fetch_sdist,
    inspect_layout,
    is_test_file,
    project_name,
    unpack_sdist,
)
from lego.tasks.realtask import task_record
from lego.tasks.testrun import SuiteResult, copy_tree
from lego.types import Task, TaskEnvironment

__all__ = ["MakeOptions", "Project", "ProjectResult", "ProjectSpec", "make_project", "prepare_project"]

_PROGRESS = Callable[[str, str], None]


class ProjectSpec(BaseModel):
    """One project to make tasks from: a recipe entry, or one input of ``lego tasks make``."""

    source: str = Field(description="A requirement (toolz==1.2.0; a bare name means the newest) or a local directory.")
    split: str = Field("train", description="Every task of the project goes to this split (split by project).")
    extras: list[str] | None = Field(None, description="Extras to install instead of the detected test extras.")
    requirements: list[str] = Field(default_factory=list, description="More requirement lines for the suite.")
    drop: list[str] = Field(default_factory=list, description="Requirement names never installed.")
    ignore: list[str] = Field(
        default_factory=list, description="Test ids or path prefixes never used (known-flaky, network, too slow)."
    )
    python: str = Field("", description='Interpreter version for the environment ("" = the one lego runs on).')
    max_tasks: int | None = Field(None, description="Cap for this project (default: the run's max_per_project).")
    environment: TaskEnvironment | None = Field(
        None, description="A pinned environment (a manifest's lock): used as is, nothing resolved."
    )


class MakeOptions(BaseModel):
    seed: int = 0
    max_per_project: int = 40
    jobs: int = 2
    runs: int = Field(3, description="Baseline runs; a test must pass every one to be used.")
    max_tries: int | None = Field(None, description="Mutants evaluated per project at most (default 12 x cap).")
    confirm_runs: int = Field(
        3,
        ge=1,
        description="Runs of a kept mutant after its first, each under its own PYTHONHASHSEED; a stable "
        "test whose result differs in any of them drops the mutant as flaky.",
    )
    per_function: int = Field(2, description="Tasks per function at most, for variety.")
    slow_test_s: float = Field(2.0, description="Tests slower than this in any baseline run are never used.")
    memory_mb: int = Field(4096, description="Address-space cap of each test run.")


@dataclass
class Project:
    """A prepared project: its pristine tree, layout, built environment and where it came from."""

    name: str
    version: str
    root: Path
    layout: ProjectLayout
    environment: TaskEnvironment
    origin: dict[str, str]
    packages: list[str]
    env_sources: list[str] = field(default_factory=list)


@dataclass
class ProjectResult:
    spec: ProjectSpec
    project: Project | None = None
    tasks: list[Task] = field(default_factory=list)
    stable: list[str] = field(default_factory=list)
    unused_tests: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    evaluated: int = 0
    seconds: float = 0.0
    error: str = ""


# -- prepare ----------------------------------------------------------------------------------


def prepare_project(spec: ProjectSpec) -> Project:
    """Fetch, unpack, inspect and build the environment of one project (TaskError when it cannot)."""
    if Path(spec.source).expanduser().is_dir():
        root, origin = checkout_tree(Path(spec.source).expanduser())
        name, version = project_name(root)
    else:
        sdist = fetch_sdist(spec.source)
        root = unpack_sdist(sdist)
        name, version = sdist.name, sdist.version
        origin = {"name": sdist.name, "version": sdist.version, "filename": sdist.filename, "sha256": sdist.sha256}
    layout = inspect_layout(root)
    if not layout.source_files:
        raise TaskError(f"{name} {version}: no Python modules found outside its tests; nothing to mutate")
    if not layout.test_files:
        raise TaskError(f"{name} {version}: the source distribution holds no test files (test_*.py, tests/)")
    if spec.environment is not None:
        locked, sources = spec.environment, ["the manifest's lock"]
    else:
        resolved = resolve_environment(
            layout, name, python=spec.python, extras=spec.extras, add=spec.requirements, drop=spec.drop
        )
        locked, sources = resolved.environment, resolved.sources
    environment = build_environment(locked).model_copy(update={"path": None})  # built already when resolved
    return Project(name, version, root, layout, environment, origin, _packages(layout), sources)


def _packages(layout: ProjectLayout) -> list[str]:
    """Top-level import names of the project's own modules."""
    names = set()
    for rel in layout.source_files:
        parts = Path(rel).parts
        if layout.import_roots != ["."]:
            parts = parts[len(Path(layout.import_roots[0]).parts) :]
        names.add(parts[0].removesuffix(".py"))
    return sorted(names)


# -- baseline ---------------------------------------------------------------------------------


@dataclass
class Baseline:
    stable: set[str]
    deselect: list[str]
    reasons: Counter[str]
    seconds: float
    output: str = ""


def _ignored(test_id: str, ignore: list[str]) -> bool:
    """A recipe's ignore rule names a test id, a test file, a directory, or a prefix of ids."""
    return any(
        test_id == rule or test_id.startswith(rule if rule.endswith(("/", "::")) else (rule + "::", rule + "/"))
        for rule in ignore
    )


def _run(
    project: Project,
    repo: Path,
    options: MakeOptions,
    *,
    deselect: Sequence[str] = (),
    timeout: float,
    per_test: float,
    method: str,
    hash_seed: int = 0,
) -> SuiteResult:
    env = build_environment(project.environment)
    args = ["--continue-on-collection-errors", f"--timeout={per_test:.0f}", "-o", f"timeout_method={method}"]
    args += [a for test in deselect for a in ("--deselect", test)]
    return run_suite(repo, env, timeout=timeout, args=args, memory_mb=options.memory_mb, hash_seed=hash_seed)


def baseline(project: Project, spec: ProjectSpec, options: MakeOptions) -> Baseline:
    """``options.runs`` runs of the pristine suite; which tests are usable (see the module docstring)."""
    runs: list[SuiteResult] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"lego-gold-{project.name}-") as tmp:
        copy_tree(project.root, Path(tmp))
        for k in range(options.runs):
            # signal method: a slow test fails alone instead of ending the run; each run its own string
            # hash seed, as each grading run has: an id or outcome that follows a set's order (isodate's
            # parametrize tables are sets of tuples of strings) differs between runs and is dropped
            runs.append(_run(project, Path(tmp), options, timeout=1800, per_test=60, method="signal", hash_seed=k + 1))
    seconds = (time.monotonic() - started) / max(1, options.runs)
    everything = set().union(*(r.statuses for r in runs))
    reasons: Counter[str] = Counter()
    stable: set[str] = set()
    deselect: list[str] = []
    for test in sorted(everything):
        statuses = {r.statuses.get(test) for r in runs}
        slow = max(r.durations.get(test, 0.0) for r in runs) > options.slow_test_s
        if not is_test_file(test.split("::")[0]):
            reasons["not in a test file (doctest)"] += 1
        elif _ignored(test, spec.ignore):
            reasons["ignored by the recipe"] += 1
            deselect.append(test)
        elif len(statuses) > 1:
            reasons["flaky"] += 1
            deselect.append(test)
        elif statuses != {"passed"}:
            reasons[f"{next(iter(statuses)) or 'missing'} on the pristine project"] += 1
        elif slow:
            reasons["slow"] += 1
            deselect.append(test)
        else:
            stable.add(test)
    return Baseline(stable, deselect, reasons, seconds, runs[-1].output if runs else "")


# -- mutants ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    mutation: Mutation
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)
    reason: str = ""


def candidates(project: Project, seed: int) -> list[Mutation]:
    found: list[Mutation] = []
    for rel in project.layout.source_files:
        try:
            source = (project.root / rel).read_bytes().decode("utf-8")
            found += find_mutations(source, rel, extended=True)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a module this interpreter cannot parse is not one the suite runs
    return interleave_kinds(found, random.Random(f"{seed}:{canonicalize_name(project.name)}"))


def _classify(result: SuiteResult, base: Baseline) -> tuple[str, set[str], set[str]]:
    if result.timed_out:
        return "timeout", set(), set()
    missing = base.stable - set(result.statuses)
    if missing:
        return "collection failed", set(), set()
    failing = result.failing() & base.stable
    if not failing:
        return "no failing test", set(), set()
    return "", failing, result.passed() & base.stable


FLAKY_MUTANT = "flaky on the mutant (a stable test's result differs between runs)"


def evaluate(project: Project, mutation: Mutation, base: Baseline, options: MakeOptions) -> Outcome:
    """Run the suite with one mutation applied; when that run makes a task, ``options.confirm_runs``
    more, each under its own hash seed, must agree with it on every stable test (module docstring)."""
    per_test = max(5.0, 5 * options.slow_test_s)
    timeout = 120 + 3 * base.seconds
    with tempfile.TemporaryDirectory(prefix=f"lego-mutant-{project.name}-") as tmp:
        work = Path(tmp)
        copy_tree(project.root, work)
        target = work / mutation.file
        target.write_bytes(mutation.apply(target.read_bytes().decode("utf-8")).encode("utf-8"))

        def run(hash_seed: int) -> SuiteResult:
            return _run(
                project,
                work,
                options,
                deselect=base.deselect,
                timeout=timeout,
                per_test=per_test,
                method="thread",
                hash_seed=hash_seed,
            )

        first = run(0)
        reason, failing, passing = _classify(first, base)
        if reason:
            return Outcome(mutation, reason=reason)
        for hash_seed in range(1, options.confirm_runs + 1):
            again = run(hash_seed)
            if any(again.statuses.get(t) != first.statuses.get(t) for t in base.stable):
                return Outcome(mutation, reason=FLAKY_MUTANT)
    messages = {t: first.messages.get(t, "") for t in sorted(failing)}
    return Outcome(mutation, sorted(failing), sorted(passing), messages)


def _in_order(project: Project, queue: Iterator[Mutation], base: Baseline, options: MakeOptions) -> Iterator[Outcome]:
    """Evaluate mutants concurrently, yielding results in queue order (deterministic output)."""
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        window: list[Future[Outcome]] = []
        try:
            for mutation in queue:
                window.append(pool.submit(evaluate, project, mutation, base, options))
                if len(window) >= max(1, options.jobs):
                    yield window.pop(0).result()
            while window:
                yield window.pop(0).result()
        finally:
            for pending in window:
                pending.cancel()


# -- tasks ------------------------------------------------------------------------------------


def _pytest_major(env: TaskEnvironment) -> int | None:
    """The major version of the pytest ``env`` pins (None when it pins none)."""
    for line in env.requirements:
        name, _, version = line.partition("==")
        if canonicalize_name(name) == "pytest" and version.split(".")[0].isdigit():
            return int(version.split(".")[0])
    return None


OLDEST_PYTEST = 7
"""The oldest pytest major the factory falls back to for a suite the newest one cannot run."""


def _older_pytest(
    spec: ProjectSpec, project: Project, base: Baseline, options: MakeOptions, say: _PROGRESS
) -> tuple[Project, Baseline]:
    """A project whose suite runs under no test of the newest pytest (a conftest hook it rejects, a
    removed API) is tried under each older major in turn, down to :data:`OLDEST_PYTEST`: the newest
    the suite runs under is kept, pinned in its environment (so in every task made from it) and named
    in its environment's sources. A locked environment is used as it is."""
    major = _pytest_major(project.environment)
    if spec.environment is not None or major is None:
        return project, base
    for bound in range(major, OLDEST_PYTEST, -1):
        say(project.name, f"no test passes under pytest {bound}.x; trying pytest<{bound}")
        older = spec.model_copy(update={"requirements": [*spec.requirements, f"pytest<{bound}"]})
        try:
            retry = prepare_project(older)
        except TaskError:
            continue
        again = baseline(retry, older, options)
        if again.stable:
            retry.env_sources.append(f"pytest<{bound} (the suite does not run under pytest {bound})")
            return retry, again
    return project, base


def make_project(spec: ProjectSpec, options: MakeOptions, progress: _PROGRESS | None = None) -> ProjectResult:
    """Validated tasks for one project, and why every other candidate was dropped (module docstring)."""
    say = progress or (lambda _project, _message: None)
    started = time.monotonic()
    result = ProjectResult(spec=spec)
    try:
        say(spec.source, "preparing (sdist, layout, environment)")
        project = result.project = prepare_project(spec)
        layout = project.layout
        say(project.name, f"{len(layout.source_files)} modules, {len(layout.test_files)} test files; baseline")
        base = baseline(project, spec, options)
        if not base.stable:
            project, base = _older_pytest(spec, project, base, options, say)
            result.project = project
        result.stable = sorted(base.stable)
        result.unused_tests.update(base.reasons)
        if not base.stable:
            raise TaskError(
                f"{project.name}: no test passes on the pristine project; its last run:\n{base.output[-1500:]}"
            )
        cap = spec.max_tasks or options.max_per_project
        tries = options.max_tries or 12 * cap
        say(project.name, f"{len(base.stable)} stable tests, {base.seconds:.1f}s a run; mutating (cap {cap})")
        per_function: Counter[str] = Counter()
        accepted: list[Outcome] = []

        def queue() -> Iterator[Mutation]:
            for mutation in candidates(project, options.seed):
                if result.evaluated >= tries or len(accepted) >= cap:
                    return
                where = f"{mutation.file}:{mutation.scope}"
                if per_function[where] >= options.per_function:
                    continue
                per_function[where] += 1  # counted on submission; given back if the mutant is dropped
                yield mutation

        for outcome in _in_order(project, queue(), base, options):
            result.evaluated += 1
            if outcome.reason:
                result.dropped[outcome.reason] += 1
                per_function[f"{outcome.mutation.file}:{outcome.mutation.scope}"] -= 1
            elif len(accepted) < cap:
                accepted.append(outcome)
            say(project.name, f"{len(accepted)} kept / {result.evaluated} tried")
        accepted.sort(key=lambda o: (o.mutation.file, o.mutation.start, o.mutation.end, o.mutation.replacement))
        result.tasks = [
            task_record(project, spec.split, o.mutation, o.fail_to_pass, o.pass_to_pass, o.messages, options.seed)
            for o in accepted
        ]
    except TaskError as exc:
        result.error = str(exc)
    result.seconds = time.monotonic() - started
    return result
