"""The bug injector: turn a library with a passing test suite into validated SWE task instances.

For each library:

1. run the gold suite 3 times; a test whose outcome differs between runs is flaky and is never
   used, a test that fails on gold is never used;
2. list mutation sites (:mod:`lego.tasks.mutations`) and visit them in a seeded order that
   round-robins over mutation kinds, so every kind is represented;
3. for each mutant, run the suite on a scratch copy with the mutation applied;
   FAIL_TO_PASS = stable tests that fail (or error) on the mutant, PASS_TO_PASS = stable tests that
   pass on both; a mutant with no failing test, a timed-out run or a broken collection is dropped,
   and identical diffs are kept once;
4. stop when the library's cap is reached.

PASS_TO_PASS is the library's whole stable suite minus FAIL_TO_PASS (suites run in well under a
second, so strict grading costs little). The test files holding FAIL_TO_PASS tests are hidden: the
agent's repo lacks them and ``test_patch`` re-adds them. Results come from junit XML reports.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lego.tasks.diffs import file_diff, new_file_diff
from lego.tasks.materialize import materialize_repo
from lego.tasks.mutations import Mutation, find_mutations, interleave_kinds
from lego.tasks.statements import problem_statement
from lego.tasks.testrun import SuiteResult, copy_tree, run_pytest
from lego.types import Task

__all__ = ["GoldBaseline", "Library", "MutantOutcome", "build_library", "gold_baseline", "ordered_mutations"]

GOLD_RUNS = 3
TEST_CMD = "python -m pytest"


@dataclass(frozen=True)
class Library:
    """A library to inject bugs into: ``root`` holds ``<package>/`` (the code) and ``tests/``."""

    name: str
    root: Path
    split: str
    package: str = ""
    repo: str = ""

    @property
    def package_name(self) -> str:
        return self.package or self.name

    @property
    def repo_name(self) -> str:
        return self.repo or f"lego-builtin/{self.name}"

    def source_files(self) -> list[str]:
        pkg = self.root / self.package_name
        return sorted(str(p.relative_to(self.root)) for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)

    def test_files(self) -> list[str]:
        tests = self.root / "tests"
        return sorted(str(p.relative_to(self.root)) for p in tests.rglob("test_*.py"))


@dataclass
class GoldBaseline:
    stable_passing: set[str]
    flaky: set[str]
    runs: list[SuiteResult] = field(default_factory=list)


@dataclass
class MutantOutcome:
    mutation: Mutation
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    messages: dict[str, str]
    reason: str = ""

    @property
    def valid(self) -> bool:
        return not self.reason


def gold_baseline(lib: Library, runs: int = GOLD_RUNS) -> GoldBaseline:
    """Run the unmodified suite ``runs`` times; keep tests that pass every time."""
    results = []
    with tempfile.TemporaryDirectory(prefix=f"lego-gold-{lib.name}-") as tmp:
        copy_tree(lib.root, Path(tmp))
        for _ in range(runs):
            results.append(run_pytest(Path(tmp)))
    all_tests = set().union(*(r.statuses for r in results))
    flaky = {t for t in all_tests if len({r.statuses.get(t) for r in results}) > 1}
    stable_passing = set.intersection(*(r.passed() for r in results)) - flaky
    return GoldBaseline(stable_passing=stable_passing, flaky=flaky, runs=results)


def ordered_mutations(lib: Library, seed: int) -> list[Mutation]:
    """All mutations of the library in a seeded order that cycles through the mutation kinds."""
    found: list[Mutation] = []
    for rel in lib.source_files():
        found += find_mutations((lib.root / rel).read_text(encoding="utf-8"), rel)
    return interleave_kinds(found, random.Random(f"{seed}:{lib.name}"))


def evaluate_mutant(lib: Library, mutation: Mutation, baseline: GoldBaseline) -> MutantOutcome:
    """Run the suite with one mutation applied and classify every stable test."""
    with tempfile.TemporaryDirectory(prefix=f"lego-mutant-{lib.name}-") as tmp:
        work = Path(tmp)
        copy_tree(lib.root, work)
        target = work / mutation.file
        target.write_text(mutation.apply(target.read_text(encoding="utf-8")), encoding="utf-8")
        result = run_pytest(work, timeout=60)
    if result.timed_out:
        return MutantOutcome(mutation, [], [], {}, reason="timeout")
    if not result.statuses:
        return MutantOutcome(mutation, [], [], {}, reason="no test results (collection failed)")
    failing = result.failing() & baseline.stable_passing
    passing = result.passed() & baseline.stable_passing
    if not failing:
        return MutantOutcome(mutation, [], [], {}, reason="no failing test")
    messages = {t: result.messages.get(t, "") for t in sorted(failing)}
    return MutantOutcome(mutation, sorted(failing), sorted(passing), messages)


def _evaluate_in_order(
    lib: Library, mutations: list[Mutation], baseline: GoldBaseline, workers: int
) -> Generator[MutantOutcome, None, None]:
    """Evaluate mutants concurrently but yield results in input order (keeps builds deterministic)."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        window: list[Future[MutantOutcome]] = []
        index = 0
        while index < len(mutations) or window:
            while index < len(mutations) and len(window) < 2 * max(1, workers):
                window.append(pool.submit(evaluate_mutant, lib, mutations[index], baseline))
                index += 1
            head = window.pop(0)
            try:
                yield head.result()
            except GeneratorExit:
                for pending in window:
                    pending.cancel()
                raise


def _instance(lib: Library, outcome: MutantOutcome, number: int, seed: int) -> Task:
    mutation = outcome.mutation
    gold = (lib.root / mutation.file).read_text(encoding="utf-8")
    buggy = mutation.apply(gold)
    patch = file_diff(mutation.file, buggy, gold)
    hidden = sorted({t.split("::")[0] for t in outcome.fail_to_pass})
    test_sources = {f: (lib.root / f).read_text(encoding="utf-8") for f in hidden}
    test_patch = "".join(new_file_diff(f, test_sources[f]) for f in hidden)
    focus = list(reversed(mutation.scope.split("."))) if mutation.scope else []
    statement = problem_statement(
        lib.package_name, outcome.fail_to_pass, outcome.messages, test_sources, patch, focus=focus
    )
    p2p = [t for t in outcome.pass_to_pass if t not in outcome.fail_to_pass]
    task = Task(
        instance_id=f"{lib.repo_name.replace('/', '__')}-{number:04d}",
        repo=lib.repo_name,
        problem_statement=statement,
        patch=patch,
        test_patch=test_patch,
        FAIL_TO_PASS=outcome.fail_to_pass,
        PASS_TO_PASS=p2p,
        version="1.0",
        test_cmd=TEST_CMD,
        split=lib.split,
        metadata={
            "library": lib.name,
            "mutation_kind": mutation.kind,
            "file": mutation.file,
            "line": mutation.line,
            "function": mutation.scope,
            "hidden_tests": hidden,
            "seed": seed,
        },
    )
    with tempfile.TemporaryDirectory(prefix="lego-base-") as tmp:
        task.base_commit = materialize_repo(lib.root, patch, test_patch, Path(tmp) / "repo")
    return task


def build_library(
    lib: Library,
    seed: int = 0,
    cap: int = 40,
    workers: int = 2,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Task], dict[str, int]]:
    """Validated task instances for one library, and counts of why mutants were dropped.

    ``on_progress(accepted, evaluated)`` is called after each evaluated mutant.
    """
    baseline = gold_baseline(lib)
    mutations = ordered_mutations(lib, seed)
    accepted: list[MutantOutcome] = []
    dropped: dict[str, int] = {"flaky_tests": len(baseline.flaky)}
    seen_patches: set[str] = set()
    evaluated = 0
    results = _evaluate_in_order(lib, mutations, baseline, workers)
    try:
        for outcome in results:
            evaluated += 1
            key = f"{outcome.mutation.file}\0{outcome.mutation.start}\0{outcome.mutation.end}\0{outcome.mutation.replacement}"
            if not outcome.valid:
                dropped[outcome.reason] = dropped.get(outcome.reason, 0) + 1
            elif key in seen_patches:
                dropped["duplicate"] = dropped.get("duplicate", 0) + 1
            else:
                seen_patches.add(key)
                accepted.append(outcome)
            if on_progress:
                on_progress(len(accepted), evaluated)
            if len(accepted) >= cap:
                break
    finally:
        results.close()
    accepted.sort(key=lambda o: (o.mutation.file, o.mutation.start, o.mutation.end, o.mutation.replacement))
    tasks = [_instance(lib, outcome, number, seed) for number, outcome in enumerate(accepted, start=1)]
    dropped["evaluated"] = evaluated
    return tasks, dropped
