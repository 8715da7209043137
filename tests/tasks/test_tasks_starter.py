"""The starter suite: deterministic generation, unseen held-out names, real validation, source spec, CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.tasks import tasks_group
from lego.config import SandboxConfig
from lego.tasks import starter
from lego.tasks.sources import StarterSource, load_source
from lego.tasks.validate import validate_task
from lego.types import Task

HOST = SandboxConfig(unsafe_no_isolation=True)
"""The grader on the host, without bubblewrap (`lego tasks validate --no-sandbox`)."""


@pytest.fixture(scope="module")
def records() -> list[Task]:
    return StarterSource().records()


def test_shipped_file_is_the_generator_output(records: list[Task]):
    """The JSONL in the package is exactly what `lego tasks build --suite starter` writes (seed 0); the CLI test
    below compares the whole file (held-out names depend on every train name before them)."""
    fresh = starter.build_starter(seed=0, sizes={"train": 5, "heldout": 0})
    shipped = {t.instance_id: t for t in records}
    assert len(fresh) == 5
    for task in fresh:
        assert shipped[task.instance_id].model_dump() == task.model_dump()
    assert {s: sum(t.split == s for t in records) for s in ("train", "heldout")} == starter.SPLIT_SIZES


def _names(task: Task) -> set[str]:
    return set(re.findall(r"^def (\w+)", task.metadata["files"][task.metadata["file"]], flags=re.M))


def test_heldout_function_names_never_occur_in_train(records: list[Task]):
    train = set().union(*(_names(t) for t in records if t.split == "train"))
    heldout = set().union(*(_names(t) for t in records if t.split == "heldout"))
    assert len(heldout) == 120 and not train & heldout, sorted(train & heldout)[:5]


def test_heldout_repos_differ_from_every_train_repo(records: list[Task]):
    train = {t.metadata["files"][t.metadata["file"]] for t in records if t.split == "train"}
    assert not [
        t.instance_id for t in records if t.split == "heldout" and t.metadata["files"][t.metadata["file"]] in train
    ]


def test_statement_names_file_function_and_operators_but_not_the_line(records: list[Task]):
    for task in records[:50]:
        fn, path = task.metadata["function"], task.metadata["file"]
        good, bad = task.metadata["mutation_kind"].split(" -> ")
        assert f"In `{path}`, `{fn}` uses `{bad}` where it should use `{good}`." in task.problem_statement
        fixed_line = next(line[1:] for line in task.patch.splitlines() if line.startswith("+") and "+++" not in line)
        assert fixed_line not in task.problem_statement
        assert task.FAIL_TO_PASS == [f"tests/test_{path.split('/')[1]}::test_{fn}"]


def test_source_specs():
    assert isinstance(load_source("starter:heldout"), StarterSource)
    assert {t.split for t in load_source("starter:train").records()} == {"train"}
    with pytest.raises(Exception, match="valid splits: train, heldout"):
        StarterSource("test")


def test_materialised_repo_hides_tests_and_carries_the_bug(records: list[Task], isolated_cache: Path):
    task = StarterSource().materialize(records[0])
    repo = Path(task.repo_path or "")
    assert not list(repo.glob("tests/*.py"))
    module = (repo / task.metadata["file"]).read_text()
    removed = next(line[1:] for line in task.patch.splitlines() if line.startswith("-") and "---" not in line)
    assert removed in module


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_gold_resolves_and_base_fails_in_the_real_sandbox(records: list[Task], isolated_cache: Path, split: str):
    task = next(t for t in records if t.split == split)
    result = validate_task(StarterSource().materialize(task))
    assert result.ok, result.reason


def test_every_instance_validates_without_sandbox(records: list[Task], isolated_cache: Path):
    """Gold passes, base fails FAIL_TO_PASS and keeps PASS_TO_PASS, for a sample of both splits (the real
    grader, on the host)."""
    sample = [t for t in records if t.split == "train"][::300] + [t for t in records if t.split == "heldout"][::60]
    for task in sample:
        result = validate_task(StarterSource().materialize(task), HOST)
        assert result.ok, (task.instance_id, result.reason)


def test_cli_build_writes_the_same_file(tmp_path: Path, records: list[Task]):
    out = tmp_path / "starter.jsonl"
    result = CliRunner().invoke(tasks_group, ["build", "--suite", "starter", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "720 starter instances" in result.output
    assert out.read_text() == starter.STARTER_PATH.read_text()


def test_tasks_where_selects_one_skill_in_every_split(isolated_cache: Path, tmp_path: Path):
    """tasks.where keeps the tasks whose metadata matches, in the one loader training, validation and eval use;
    a key no task has is refused with the keys there are, and a selection that leaves nothing says so."""
    from lego.config import load_config
    from lego.errors import ConfigError
    from lego.tasks.sources import load_tasks, pick_tasks

    logic = "tasks.where={mutation_kind = ['and -> or', 'or -> and']}"
    cfg = load_config(None, ["tasks.source=starter", logic])
    train, _ = pick_tasks(cfg.tasks.split_spec("train"), cfg.tasks.where)
    assert len(train) == 82 and {t.metadata["mutation_kind"] for t in train} == {"and -> or", "or -> and"}
    heldout = load_tasks("starter:heldout", cfg.tasks.where, limit=3)
    assert len(heldout) == 3 and all(t.metadata["mutation_kind"] in ("and -> or", "or -> and") for t in heldout)
    assert all(Path(t.repo_path or "").is_dir() for t in heldout)  # materialised, ready to run
    with pytest.raises(ConfigError, match=r"no task has metadata \['kind'\]; the tasks have \[.*'mutation_kind'"):
        pick_tasks("starter:train", {"kind": ["x"]})
    with pytest.raises(ConfigError, match=r"holds no tasks with tasks.where"):
        pick_tasks("starter:heldout", {"mutation_kind": ["* -> /"]})


def test_limit_is_the_first_n_in_the_sources_order(isolated_cache: Path):
    """One meaning of a limit for training (tasks.limit), validation and `lego eval` (eval.limit): the first
    N of the selected tasks in the source's order, so a smaller limit is a prefix of a larger one."""
    from lego.tasks.sources import pick_tasks

    where = {"mutation_kind": ["and -> or", "or -> and"]}
    every, _ = pick_tasks("starter:heldout", where)
    for n in (1, 5, len(every) + 3):
        first, _ = pick_tasks("starter:heldout", where, limit=n)
        assert [t.instance_id for t in first] == [t.instance_id for t in every[:n]]


def test_boundary_suite_plants_off_by_one_bounds_the_negation_does_not_fix(isolated_cache: Path, tmp_path: Path):
    """`boundary` is the starter generator with `>=` written `>` and `<=` written `<`: buggy lines look like
    the starter suite's (whose `>` is fixed by `<=`), and the hidden tests fail the negation. The shipped
    file is the generator's output; held-out names are new; the gold fix validates."""
    records = StarterSource(family="boundary").records()
    assert {s: sum(t.split == s for t in records) for s in ("train", "heldout")} == starter.FAMILIES["boundary"].sizes
    fresh = starter.build_starter(seed=0, sizes={"train": 3, "heldout": 0}, family="boundary")
    shipped = {t.instance_id: t for t in records}
    assert [shipped[t.instance_id].model_dump() for t in fresh] == [t.model_dump() for t in fresh]
    assert {t.metadata["mutation_kind"] for t in records} == {">= -> >", "<= -> <"}
    assert all(t.instance_id.startswith("lego-boundary__") for t in records)
    train = set().union(*(_names(t) for t in records if t.split == "train"))
    assert not train & set().union(*(_names(t) for t in records if t.split == "heldout"))
    source = load_source("boundary:heldout")
    task = source.materialize(source.records()[0])
    assert validate_task(task, HOST).ok
    good, bad = task.metadata["mutation_kind"].split(" -> ")
    negation = {">": "<=", "<": ">="}[bad]
    import shutil
    import subprocess
    import sys

    repo = shutil.copytree(Path(task.repo_path or ""), tmp_path / "repo")
    module = repo / task.metadata["file"]
    text = module.read_text()
    assert f" {bad} " in text and f" {good} " not in text
    module.write_text(text.replace(f" {bad} ", f" {negation} "))
    subprocess.run(["git", "apply", "-"], input=task.test_patch, text=True, cwd=repo, check=True)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *task.FAIL_TO_PASS], cwd=repo, capture_output=True, text=True
    )
    assert run.returncode == 1 and "1 failed" in run.stdout, run.stdout  # the swap family's fix fails here


def test_a_built_starter_file_is_a_task_source(tmp_path: Path, isolated_cache: Path):
    """What `lego tasks build --suite ... --output FILE` writes loads as `FILE.jsonl[:SPLIT]`: each record
    carries its files and its repo is built on materialise (as the shipped suites')."""
    out = tmp_path / "mine.jsonl"
    result = CliRunner().invoke(tasks_group, ["build", "--suite", "boundary", "--output", str(out)])
    assert result.exit_code == 0 and "300 boundary instances" in result.output, result.output
    assert out.read_text() == starter.BOUNDARY_PATH.read_text()  # the shipped suite is this output, whole
    source = load_source(f"{out}:heldout")
    task = source.materialize(source.records()[0])
    assert Path(task.repo_path or "").is_dir() and validate_task(task, HOST).ok
