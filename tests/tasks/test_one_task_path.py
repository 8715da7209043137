"""One task path: every command that touches a task gets it made ready the same way.

The task here is the hard case from issue 44: a src/-layout project that pytest itself imports
(iniconfig), given as a JSONL record that names no environment and no import roots. Made ready, its
repo's ``src`` is an import root, so the grader tests the repo's copy; loaded raw, the installed copy
is tested instead and an empty patch scores 1. Each loader every command uses must hand out the same
ready task, and the commands themselves must grade it alike: the gold patch 1, an empty patch 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lego.sandboxes.grading import grade
from lego.tasks.sources import load_source, load_tasks, pick_tasks
from lego.types import Task
from tests.sandboxes.sbx_fixtures import _patch, commit_tree

HIDDEN = (
    "from iniconfig import IniConfig\n\n\n"
    "def test_value_is_stripped():\n    assert IniConfig('x', data='[a]\\nb = 1\\n')['a']['b'] == '1'\n"
)


@pytest.fixture()
def task_file(tmp_path: Path) -> Path:
    import iniconfig

    files = {f"src/iniconfig/{p.name}": p.read_text() for p in Path(iniconfig.__file__).parent.glob("*.py")}
    fixed = files["src/iniconfig/_parse.py"]
    files["src/iniconfig/_parse.py"] = fixed.replace("value = value.strip()", "value = value.rstrip()")
    files["pyproject.toml"] = (
        "[project]\nname = 'iniconfig'\nversion = '0'\n\n[tool.pytest.ini_options]\ntestpaths = ['testing']\n"
    )
    repo = commit_tree(tmp_path / "iniconfig", files)
    record = Task(
        instance_id="iniconfig-strip",
        repo="pytest-dev/iniconfig",
        problem_statement="IniConfig keeps the leading blanks of a value: `b =   1` reads as '  1'.",
        patch=_patch(repo, "src/iniconfig/_parse.py", fixed),
        test_patch=_patch(repo, "testing/test_strip.py", HIDDEN),
        FAIL_TO_PASS=["testing/test_strip.py::test_value_is_stripped"],
        repo_path="iniconfig",  # relative to the file, as a user writes it
        split="test",
    )
    raw = record.model_dump(exclude_none=True)
    raw.pop("environment", None)
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    return path


def test_every_loader_hands_out_the_same_ready_task(task_file: Path) -> None:
    spec = str(task_file)
    source = load_source(spec)
    records, picked_from = pick_tasks(spec)
    ready = {
        "run (get)": source.get("iniconfig-strip"),
        "tasks()": next(source.tasks()),
        "eval/validate (load_tasks)": load_tasks(spec)[0],
        "train (pick_tasks, then materialize)": picked_from.materialize(records[0]),
    }
    first = next(iter(ready.values()))
    assert first.environment is not None and first.environment.import_roots == ["src"]
    for name, task in ready.items():
        assert task == first, name
    assert source.materialize(first) == first  # a ready task made ready again is the same task
    assert grade(first, "").reward == 0.0  # the repo's copy is under test, not the installed one
    assert grade(first, first.patch).reward == 1.0


def _lego(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lego", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.slow
def test_run_eval_and_validate_grade_the_task_alike(task_file: Path, tmp_path: Path) -> None:
    run = _lego(
        "run", "--engine", "oracle", "--tasks", str(task_file), "--task", "iniconfig-strip",
        "--out", str(tmp_path / "run.json"), "--max-turns", "10", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((tmp_path / "run.json").read_text())["reward"] == 1.0
    validate = _lego("tasks", "validate", str(task_file), cwd=tmp_path)  # gold 1 and the empty patch 0
    assert validate.returncode == 0, validate.stdout[-3000:] + validate.stderr[-3000:]
    evaluated = _lego(
        "eval", "--policy", "oracle", "--harness", "lego-agent", "--tasks", str(task_file), "--samples", "1",
        "--out", str(tmp_path / "eval"), cwd=tmp_path,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    samples = {s["key"]["task_id"]: s for s in json.loads((tmp_path / "eval" / "results.json").read_text())["samples"]}
    assert samples.pop("iniconfig-strip")["reward"] == 1.0
    (canary,) = samples.values()  # tasks.canary_rate: the task's impossible twin, which the oracle fails
    assert canary["key"]["task_id"] == "canary-iniconfig-strip" and canary["reward"] == 0.0
