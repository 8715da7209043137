"""The factory keeps a mutant only when its result repeats: re-runs under other hash seeds, kept ones only.

No sdist, no environment, no pytest run: the suite runs are stood in for by a function of the mutated
source and the run's PYTHONHASHSEED (what :func:`lego.tasks.factory._run` passes to ``run_suite``), so
each rule is checked exactly and in milliseconds. The mutants are real ones of a real file.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lego.tasks import factory
from lego.tasks.factory import (
    FLAKY_MUTANT,
    Baseline,
    MakeOptions,
    Project,
    ProjectSpec,
    evaluate,
    make_project,
)
from lego.tasks.mutations import Mutation
from lego.tasks.realrepo import ProjectLayout
from lego.tasks.testrun import SuiteResult
from lego.types import TaskEnvironment

SOURCE = "def size(a, b):\n    return a - b\n"
STABLE = {"tests/test_m.py::test_size", "tests/test_m.py::test_evict"}


def _project(root: Path) -> Project:
    (root / "m.py").write_text(SOURCE)
    (root / "tests").mkdir()
    (root / "tests" / "test_m.py").write_text("def test_size(): pass\ndef test_evict(): pass\n")
    layout = ProjectLayout(root=root, import_roots=["."], source_files=["m.py"], test_files=["tests/test_m.py"])
    return Project("m", "1.0", root, layout, TaskEnvironment(), {"path": str(root)}, ["m"])


def _mutation(replacement: str) -> Mutation:
    start = SOURCE.index("a - b")
    return Mutation("m.py", 2, start, start + len("a - b"), replacement, "swapped_operands", "size")


def _suite(flaky_seeds: set[int], seeds: list[int]) -> Any:
    """A stand-in for ``_run``: on a mutated tree test_size fails; test_evict fails too under the hash
    seeds in ``flaky_seeds`` when the mutant is ``b - a`` (a PASS_TO_PASS test that depends on chance)."""

    def run(project: Project, repo: Path, options: MakeOptions, *, hash_seed: int = 0, **_: Any) -> SuiteResult:
        seeds.append(hash_seed)
        mutated = (repo / "m.py").read_text()
        statuses = {t: "passed" for t in STABLE}
        if mutated != SOURCE:
            statuses["tests/test_m.py::test_size"] = "failed"
        if "b - a" in mutated and hash_seed in flaky_seeds:
            statuses["tests/test_m.py::test_evict"] = "failed"
        if "a + b" in mutated:  # a mutant no test catches
            statuses["tests/test_m.py::test_size"] = "passed"
        return SuiteResult(statuses=statuses)

    return run


def _baseline() -> Baseline:
    return Baseline(stable=set(STABLE), deselect=[], reasons=Counter(), seconds=1.0)


@pytest.mark.parametrize("flaky_seed", [1, 2, 3])
def test_a_mutant_flaky_under_one_hash_seed_is_dropped(
    flaky_seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run keeps it; one of the confirm runs (each its own seed) disagrees: dropped, named."""
    seeds: list[int] = []
    monkeypatch.setattr(factory, "_run", _suite({flaky_seed}, seeds))
    outcome = evaluate(_project(tmp_path), _mutation("b - a"), _baseline(), MakeOptions())
    assert outcome.reason == FLAKY_MUTANT
    assert seeds == list(range(flaky_seed + 1))  # seeds 0, 1, ...: stops at the first disagreement


def test_a_repeatable_mutant_is_confirmed_under_distinct_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds: list[int] = []
    monkeypatch.setattr(factory, "_run", _suite(set(), seeds))
    outcome = evaluate(_project(tmp_path), _mutation("b - a"), _baseline(), MakeOptions(confirm_runs=3))
    assert not outcome.reason
    assert outcome.fail_to_pass == ["tests/test_m.py::test_size"]
    assert outcome.pass_to_pass == ["tests/test_m.py::test_evict"]
    assert seeds == [0, 1, 2, 3]


def test_only_a_mutant_that_would_be_kept_pays_for_confirm_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds: list[int] = []
    monkeypatch.setattr(factory, "_run", _suite({1, 2, 3}, seeds))
    outcome = evaluate(_project(tmp_path), _mutation("a + b"), _baseline(), MakeOptions())
    assert outcome.reason == "no failing test"
    assert seeds == [0]


def test_the_summary_names_the_flaky_mutant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make_project: the flaky mutant is counted under its reason, the repeatable one becomes a task."""
    project = _project(tmp_path)
    monkeypatch.setattr(factory, "prepare_project", lambda spec: project)
    monkeypatch.setattr(factory, "baseline", lambda project, spec, options: _baseline())
    monkeypatch.setattr(factory, "candidates", lambda project, seed: [_mutation("b - a"), _mutation("a * b")])
    monkeypatch.setattr(factory, "_run", _suite({2}, []))
    monkeypatch.setattr(factory, "task_record", lambda project, split, mutation, *rest: mutation.replacement)
    result = make_project(ProjectSpec(source=str(tmp_path)), MakeOptions(jobs=1))
    assert not result.error
    assert result.dropped == Counter({FLAKY_MUTANT: 1})
    assert result.tasks == ["a * b"]
    assert result.evaluated == 2
