"""A suite the newest pytest cannot run (issue 44): a legacy conftest hook that pytest 9 rejects. The
factory falls back to the newest pytest the suite runs under, pins it in the tasks' environment, and
the tasks it makes grade as promised."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.tasks import tasks_group
from lego.sandboxes.grading import grade
from lego.tasks.sources import JsonlSource

CONFTEST = "def pytest_collect_file(path, parent):  # py.path hook argument: removed in pytest 9\n    return None\n"
MODULE = """\
def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(values):
    return sum(values) / len(values)
"""
TESTS = """\
from legacy_calc import clamp, mean


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(30, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 6]) == 3
"""


@pytest.mark.slow_factory
def test_a_suite_pytest_9_rejects_is_made_under_pytest_8(tmp_path: Path, real_cache: Path) -> None:
    project = tmp_path / "legacy-calc"
    files = {
        "legacy_calc.py": MODULE,
        "tests/conftest.py": CONFTEST,
        "tests/test_calc.py": TESTS,
        "pyproject.toml": "[project]\nname = 'legacy-calc'\nversion = '1.0'\n",
    }
    for rel, text in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(tasks_group, ["make", str(project), "--out", str(out), "--max-per-project", "2"])
    assert result.exit_code == 0, result.output
    tasks = JsonlSource(out / "tasks.jsonl").records()
    assert tasks
    for record in tasks:
        env = record.environment
        assert env is not None
        assert any(r.startswith("pytest==8.") for r in env.requirements), env.requirements
    task = JsonlSource(out / "tasks.jsonl").get(tasks[0].instance_id)
    assert grade(task, task.patch).reward == 1.0
    assert grade(task, "").reward == 0.0
