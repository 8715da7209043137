"""The shipped built-in suite: size, split by library, statements, materialisation, validation, CLI."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.tasks import tasks_group
from lego.config import SandboxConfig
from lego.tasks import builtin
from lego.tasks.diffs import patch_files
from lego.tasks.materialize import materialize_repo
from lego.tasks.sources import BuiltinSource
from lego.tasks.statements import fixed_lines
from lego.tasks.validate import validate_task
from lego.types import Task

HOST = SandboxConfig(unsafe_no_isolation=True)
"""The grader on the host, without bubblewrap (`lego tasks validate --no-sandbox`)."""


@pytest.fixture(scope="module")
def records() -> list[Task]:
    return BuiltinSource().records()


def test_suite_size_and_spread(records: list[Task]):
    per_library = Counter(t.metadata["library"] for t in records)
    assert len(records) >= 200
    assert len(per_library) >= 6 and set(per_library) == set(builtin.LIBRARIES)
    heldout = {lib for lib, split in builtin.LIBRARIES.items() if split == "heldout"}
    assert len(heldout) >= 2
    assert sum(per_library[lib] for lib in heldout) >= 100
    assert len({t.instance_id for t in records}) == len(records)


def test_splits_are_disjoint_by_library(records: list[Task]):
    by_split: dict[str, set[str]] = {}
    for task in records:
        assert task.split == builtin.LIBRARIES[task.metadata["library"]]
        by_split.setdefault(task.split, set()).add(task.metadata["library"])
    assert set(by_split) == {"train", "heldout"}
    assert not by_split["train"] & by_split["heldout"]
    source = BuiltinSource(split="heldout")
    assert {t.split for t in source.records()} == {"heldout"}


def test_records_are_well_formed(records: list[Task]):
    kinds = Counter(t.metadata["mutation_kind"] for t in records)
    assert len(kinds) >= 8
    for task in records:
        assert task.FAIL_TO_PASS and not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
        assert patch_files(task.patch) == [task.metadata["file"]]
        assert patch_files(task.test_patch) == task.metadata["hidden_tests"]
        assert {t.split("::")[0] for t in task.FAIL_TO_PASS} == set(task.metadata["hidden_tests"])
        assert len(task.base_commit) == 40 and task.test_cmd == "python -m pytest"
        assert task.repo_path is None


def test_statements_do_not_leak_the_fix(records: list[Task]):
    for task in records:
        statement = task.problem_statement
        for line in fixed_lines(task.patch):
            assert line not in statement, (task.instance_id, line)
        assert len(statement) > 80
        assert "Expected" in statement or "passed in earlier releases" in statement


def test_materialised_repo_matches_base_commit(records: list[Task], isolated_cache: Path, tmp_path: Path):
    task = next(t for t in records if t.split == "heldout")
    prepared = BuiltinSource().materialize(task)
    repo = Path(prepared.repo_path or "")
    assert repo.parent == isolated_cache / "tasks"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    assert head.stdout.strip() == task.base_commit
    count = subprocess.run(
        ["git", "rev-list", "--all", "--count"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert count.stdout.strip() == "1"
    for hidden in task.metadata["hidden_tests"]:
        assert not (repo / hidden).exists()
    assert not (repo / ".git" / "logs").exists()
    again = materialize_repo(builtin.library_dir(task.metadata["library"]), task.patch, task.test_patch, tmp_path / "x")
    assert again == task.base_commit
    assert BuiltinSource().materialize(task).repo_path == str(repo)  # cached


@pytest.mark.parametrize("library", ["roman", "template"])
def test_validate_one_task_per_library_without_sandbox(records: list[Task], isolated_cache: Path, library: str):
    task = next(t for t in records if t.metadata["library"] == library)
    result = validate_task(BuiltinSource().materialize(task), HOST)
    assert result.ok, result.reason


def test_validate_one_task_in_the_real_sandbox(records: list[Task], isolated_cache: Path):
    from lego.sandboxes.factory import create_sandbox  # noqa: F401  (the grader's backend must import)

    if subprocess.run(["which", "bwrap"], capture_output=True).returncode != 0:
        pytest.skip("bubblewrap is not installed")
    task = next(t for t in records if t.metadata["library"] == "lrucache")
    result = validate_task(BuiltinSource().materialize(task))
    assert result.ok, result.reason


def test_cli_list_and_show(records: list[Task]):
    runner = CliRunner()
    out = runner.invoke(tasks_group, ["list", "builtin:heldout"])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("lego-builtin__")]
    heldout = [t for t in records if t.split == "heldout"]
    assert [line.split("\t")[0] for line in lines] == [t.instance_id for t in heldout]
    shown = runner.invoke(tasks_group, ["show", heldout[0].instance_id])
    assert shown.exit_code == 0 and heldout[0].patch in shown.output


def test_cli_list_reports_malformed_lines():
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "tasks" / "swebench_sample.jsonl"
    refused = CliRunner().invoke(tasks_group, ["list", str(fixture)])
    assert refused.exit_code != 0 and "swebench_sample.jsonl:3: invalid JSON" in str(refused.exception)
    out = CliRunner().invoke(tasks_group, ["list", str(fixture), "--skip-bad-lines"])
    assert out.exit_code == 0
    assert out.output.splitlines()[0].startswith("acme__widgets-101\t")
    assert "swebench_sample.jsonl:3: invalid JSON" in out.output
    assert "5 malformed line(s) skipped" in out.output


def test_cli_validate_limit_without_sandbox(isolated_cache: Path):
    out = CliRunner().invoke(tasks_group, ["validate", "builtin:train", "--limit", "2", "--no-sandbox"])
    assert out.exit_code == 0, out.output
    assert "2/2 instances valid" in out.output


def test_a_malformed_task_line_stops_train_and_validate_naming_it(tmp_path: Path) -> None:
    """Issue 45: a bad line is exit 2 naming file:line before anything runs (it used to be skipped by
    `lego train`, and `lego tasks validate` said "1/1 instances valid" and exited 1)."""
    import subprocess
    import sys

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "tasks" / "swebench_sample.jsonl"
    for args in (
        ["tasks", "validate", str(fixture), "--no-sandbox"],
        ["train", "-o", f"tasks.source={fixture}", "-o", f"training.out_dir={tmp_path / 'run'}"],
    ):
        run = subprocess.run([sys.executable, "-m", "lego", *args], capture_output=True, text=True, timeout=300)
        assert run.returncode == 2, (args, run.stderr[-1500:])
        assert "swebench_sample.jsonl:3: invalid JSON" in run.stderr, run.stderr[-1500:]
    assert not (tmp_path / "run").exists()  # nothing of the run is left behind
