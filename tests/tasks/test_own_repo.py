"""A user's own repo as a task (README, "Your own repo and a test command"), as a user writes the record:
the layouts and environments of real projects lego has never seen, validated through the real grader."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lego.config import SandboxConfig
from lego.tasks import checkout
from lego.tasks.materialize import git_env
from lego.tasks.sources import JsonlSource
from lego.tasks.validate import validate_task
from lego.types import TaskEnvironment

HOST = SandboxConfig(unsafe_no_isolation=True)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, env=git_env(), check=True, capture_output=True, text=True).stdout


def _own_repo(root: Path, files: dict[str, str], fix: dict[str, str]) -> tuple[str, str, str]:
    """A repo with its buggy commit and the fix (with its new tests) on top, as a developer has it:
    (base_commit, patch of the non-test files, test_patch)."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "buggy")
    base = _git(root, "rev-parse", "HEAD").strip()
    for rel, text in fix.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "fix")
    return (
        base,
        _git(root, "diff", base, "HEAD", "--", "src", "shapes"),
        _git(root, "diff", base, "HEAD", "--", "tests"),
    )


_TEST = """import pytest

from shapes.size import area, square


@pytest.mark.parametrize("w, h, want", [(2, 3, 6), (2, 2, 4)])
def test_area(w, h, want):
    assert area(w, h) == want


def test_square():
    assert square(0) == 0
"""


def _record(
    tmp_path: Path, pkg_root: str, environment: dict | None = None, test: str = _TEST, pytest_ini: str = ""
) -> Path:
    pkg = f"{pkg_root}/shapes" if pkg_root else "shapes"
    repo = tmp_path / "shapes"
    repo.mkdir()
    base, patch, test_patch = _own_repo(
        repo,
        {
            f"{pkg}/__init__.py": "",
            f"{pkg}/size.py": "def area(w, h):\n    return w + h\n\n\ndef square(s):\n    return s * s\n",
            "pyproject.toml": '[project]\nname = "shapes"\nversion = "1.0"\n' + pytest_ini,
            "tests/test_other.py": "def test_nothing():\n    assert True\n",
        },
        {
            f"{pkg}/size.py": "def area(w, h):\n    return w * h\n\n\ndef square(s):\n    return s * s\n",
            "tests/test_size.py": test,
        },
    )
    record = {
        "instance_id": "me__shapes-1",
        "repo": "me/shapes",
        "repo_path": "shapes",
        "base_commit": base,
        "problem_statement": "area() adds the sides instead of multiplying them.",
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": ["tests/test_size.py::test_area[2-3-6]"],
        "PASS_TO_PASS": ["tests/test_size.py::test_area[2-2-4]", "tests/test_size.py::test_square"],
        "test_cmd": "python -m pytest -q",
    }
    if environment is not None:
        record["environment"] = environment
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


def test_a_src_layout_is_importable_without_naming_its_import_roots(tmp_path: Path, isolated_cache: Path):
    """A src/ layout whose record leaves ``environment`` out: its code is under src/, which the grader
    must put first on sys.path as the factory does for such a project (before: every test failed to
    import ``shapes``, and a project the grader's interpreter also has installed was graded as that
    installed copy: pristine passing, any diff rewarded)."""
    source = JsonlSource(_record(tmp_path, "src"))
    task = source.materialize(source.get("me__shapes-1"))
    assert task.environment is not None and task.environment.import_roots == ["src"]
    result = validate_task(task, HOST)
    assert result.ok, result.reason + result.log
    assert result.base["tests/test_size.py::test_area[2-3-6]"] == "failed"


def test_import_roots_the_record_names_are_kept(tmp_path: Path, isolated_cache: Path):
    source = JsonlSource(_record(tmp_path, "src", {"import_roots": ["."]}))
    task = source.materialize(source.get("me__shapes-1"))
    assert task.environment is not None and task.environment.import_roots == ["."]
    flat = tmp_path / "flat"
    flat.mkdir()
    source = JsonlSource(_record(flat, ""))
    task = source.materialize(source.get("me__shapes-1"))
    assert task.environment is None, "a flat layout keeps lego's own runtime, at no cost"
    assert validate_task(task, HOST).ok


def test_the_environment_a_record_names_is_built(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch):
    """``environment.requirements`` of a local-repo record is installed (before: never built, so its tests
    ran on lego's own runtime and a conftest importing a test dependency failed to collect)."""
    built: list[TaskEnvironment] = []

    def build(env: TaskEnvironment) -> TaskEnvironment:
        built.append(env)
        return env.model_copy(update={"path": "/built"})

    monkeypatch.setattr(checkout, "build_environment", build)
    source = JsonlSource(_record(tmp_path, "src", {"requirements": ["six==1.16.0"]}))
    task = source.materialize(source.get("me__shapes-1"))
    assert [e.requirements for e in built] == [["six==1.16.0"]]
    assert task.environment is not None and task.environment.path == "/built"
    assert task.environment.import_roots == ["src"]


@pytest.mark.network
def test_a_test_dependency_the_record_names_is_there_when_graded(tmp_path: Path, real_cache: Path):
    path = _record(tmp_path, "src", {"requirements": ["six==1.16.0"]}, "import six\n" + _TEST)
    source = JsonlSource(path)
    result = validate_task(source.materialize(source.get("me__shapes-1")), HOST)
    assert result.ok, result.reason + result.log


@pytest.mark.network
def test_a_suite_that_runs_on_xdist_workers_is_graded_in_one_process(tmp_path: Path, real_cache: Path):
    """``addopts = "-n 2"`` (pytest-xdist, declared as the environment's plugin): the grader's test run
    must stay in the process its bootstrap prepared (before: the tests ran on xdist workers, which have
    no witness builtin and report no collection, so the pristine repo was "not collected" and the task
    could not be graded at all)."""
    ini = '\n[tool.pytest.ini_options]\naddopts = "-n 2 --dist loadfile"\n'
    env = {"requirements": ["pytest-xdist==3.6.1"], "plugins": ["xdist.plugin", "xdist.looponfail"]}
    source = JsonlSource(_record(tmp_path, "src", env, pytest_ini=ini))
    result = validate_task(source.materialize(source.get("me__shapes-1")), HOST)
    assert result.ok, result.reason + result.log
