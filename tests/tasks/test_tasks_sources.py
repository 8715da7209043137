"""Task sources: SWE-bench-format JSONL (errors with line numbers, extras, splits, repos) and specs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lego.config import SandboxConfig
from lego.errors import TaskError
from lego.seams import TaskSource
from lego.tasks.materialize import git_env
from lego.tasks.sources import BuiltinSource, JsonlSource, load_source, require_repo
from lego.tasks.validate import validate_task

HOST = SandboxConfig(unsafe_no_isolation=True)
"""The grader on the host, without bubblewrap (`lego tasks validate --no-sandbox`)."""
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tasks" / "swebench_sample.jsonl"


def test_jsonl_source_is_a_task_source():
    assert isinstance(JsonlSource(FIXTURE, strict=False), TaskSource)
    assert isinstance(BuiltinSource(), TaskSource)


def test_malformed_lines_reported_with_line_numbers():
    source = JsonlSource(FIXTURE, strict=False)
    ids = [t.instance_id for t in source.records()]
    assert ids == ["acme__widgets-101", "acme__gadgets.f00dbabe.func_pm_op_swap__x1", "acme__widgets-104"]
    reports = {str(e).split(": ", 1)[0].rsplit(":", 1)[1]: str(e) for e in source.errors}
    assert set(reports) == {"3", "4", "5", "6", "9"}
    assert "invalid JSON" in reports["3"]
    assert "missing required field(s): patch" in reports["4"]
    assert "FAIL_TO_PASS" in reports["5"]
    assert "duplicate instance_id 'acme__widgets-101' (first on line 1)" in reports["6"]
    assert "expected a JSON object, got list" in reports["9"]
    assert all(str(FIXTURE) in str(e) for e in source.errors)


def test_a_bad_line_stops_the_load_naming_it_unless_skipping_is_asked_for():
    with pytest.raises(TaskError, match=r"swebench_sample.jsonl:3: invalid JSON"):
        JsonlSource(FIXTURE).records()
    with pytest.raises(TaskError, match=r"swebench_sample.jsonl:3: invalid JSON"):
        load_source(str(FIXTURE)).records()
    assert len(load_source(str(FIXTURE), skip_bad_lines=True).records()) == 3


def test_swebench_fields_decoded_and_extras_kept():
    source = JsonlSource(FIXTURE, strict=False)
    task = source.get("acme__widgets-101")
    assert task.FAIL_TO_PASS == ["tests/test_size.py::test_area"] and task.PASS_TO_PASS == []
    assert task.version == "1.2" and task.environment_setup_commit.startswith("3f2a9c")
    smith = source.get("acme__gadgets.f00dbabe.func_pm_op_swap__x1")
    assert smith.image == "swesmith.x86_64.acme__gadgets.f00dbabe"
    assert smith.metadata == {"difficulty": "easy"}


def test_splits_and_filtering():
    source = JsonlSource(FIXTURE, strict=False)
    assert source.splits() == ["dev", "test", "train"]
    assert [t.instance_id for t in source.tasks("dev")] == ["acme__widgets-104"]
    with pytest.raises(TaskError, match="no split 'nope'"):
        list(source.tasks("nope"))


def test_missing_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(TaskError, match="does not exist"):
        JsonlSource(tmp_path / "absent.jsonl").records()


def test_relative_repo_path_resolved_and_missing_repo_fails_only_that_task():
    task = JsonlSource(FIXTURE, strict=False).get("acme__widgets-104")
    assert task.repo_path == str((FIXTURE.parent / "repos" / "widgets").resolve())
    with pytest.raises(TaskError, match=r"acme__widgets-104: repo .* does not exist"):
        require_repo(task)
    result = validate_task(task, HOST)
    assert not result.ok and "does not exist" in result.reason
    unset = JsonlSource(FIXTURE, strict=False).get("acme__widgets-101")
    with pytest.raises(TaskError, match="no local repo"):
        require_repo(unset)


def _widgets_repo(root: Path) -> Path:
    (root / "widgets").mkdir(parents=True)
    (root / "widgets" / "__init__.py").write_text("")
    (root / "widgets" / "size.py").write_text("def area(w, h):\n    return w + h\n")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    env = git_env()
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "base"]):
        subprocess.run(cmd, cwd=root, env=env, check=True)
    return root


def test_repos_dir_lookup_and_plain_validation(tmp_path: Path):
    _widgets_repo(tmp_path / "repos" / "acme__widgets")
    source = JsonlSource(FIXTURE, repos_dir=tmp_path / "repos", strict=False)
    # the record as located (its base_commit names no commit of this fresh repo, so `get` would refuse it)
    task = next(t for t in source.records() if t.instance_id == "acme__widgets-101")
    assert task.repo_path == str(tmp_path / "repos" / "acme__widgets")
    result = validate_task(task, HOST)
    assert result.ok, result.reason
    assert result.gold == {"tests/test_size.py::test_area": "passed"}
    assert result.base == {"tests/test_size.py::test_area": "failed"}


def test_validation_reports_a_gold_patch_that_does_not_fix(tmp_path: Path):
    _widgets_repo(tmp_path / "repos" / "acme__widgets")
    records = JsonlSource(FIXTURE, repos_dir=tmp_path / "repos", strict=False).records()
    task = next(t for t in records if t.instance_id == "acme__widgets-101")
    broken = task.model_copy(update={"patch": task.patch.replace("w * h", "w - h")})
    result = validate_task(broken, HOST)
    # the grader finds it first: a gold patch that fails the tests as written makes no reference (issue 43)
    assert not result.ok and "the gold patch does not pass the hidden tests" in result.reason
    assert "1 expected test(s) fail with it, e.g. tests/test_size.py::test_area" in result.reason


def test_load_source_specs(tmp_path: Path):
    assert isinstance(load_source("builtin"), BuiltinSource)
    assert load_source("builtin:heldout").default_split == "heldout"
    jsonl = load_source(f"{FIXTURE}:dev", skip_bad_lines=True)
    assert isinstance(jsonl, JsonlSource) and jsonl.default_split == "dev"
    assert [t.instance_id for t in jsonl.tasks()] == ["acme__widgets-104"]
    assert load_source(str(FIXTURE)).default_split is None
    with pytest.raises(TaskError, match="no split 'bogus'"):
        load_source("builtin:bogus")
    with pytest.raises(TaskError, match="unknown task source"):
        load_source("nonsense")
    copy = tmp_path / "dir:with:colons"
    copy.mkdir()
    shutil.copy(FIXTURE, copy / "t.jsonl")
    assert len(load_source(str(copy / "t.jsonl"), skip_bad_lines=True).records()) == 3


def test_swebench_log_parser():
    pytest.importorskip("swebench")
    from lego.tasks.swebench_compat import parse_test_log

    log = "PASSED tests/test_a.py::test_ok\nFAILED tests/test_a.py::test_bad - AssertionError\nERROR tests/test_b.py::test_e\n"
    assert parse_test_log("acme/widgets", log) == {
        "tests/test_a.py::test_ok": "passed",
        "tests/test_a.py::test_bad": "failed",
        "tests/test_b.py::test_e": "error",
    }
