"""`lego tasks validate` on the real grader (the host backend: `--no-sandbox`), its exit codes and
reports, and a user's own repo (with its history) plus a test command as a task source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.tasks import tasks_group
from lego.tasks.materialize import git_env
from lego.tasks.sources import load_source

BUGGY = "def area(w, h):\n    return w + h\n"
FIXED = "def area(w, h):\n    return w * h\n"
TESTS = "from shapes.size import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n\n\ndef test_square():\n    assert area(0, 0) == 0\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=git_env(), check=True, capture_output=True, text=True).stdout


def own_repo(root: Path) -> tuple[Path, str]:
    """A project with history: the buggy commit, then the fix with its regression test (HEAD)."""
    repo = root / "shapes-project"
    (repo / "shapes").mkdir(parents=True)
    (repo / "shapes" / "__init__.py").write_text("")
    (repo / "shapes" / "size.py").write_text(BUGGY)
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "area")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "shapes" / "size.py").write_text(FIXED)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_size.py").write_text(TESTS)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "fix area")
    return repo, base


def record(repo: Path, base: str, **extra: object) -> dict:
    diff = _git(repo, "diff", base, "HEAD", "--", "shapes")
    tests = _git(repo, "diff", base, "HEAD", "--", "tests")
    return {
        "instance_id": "me__shapes-1",
        "repo": "me/shapes",
        "repo_path": repo.name,
        "base_commit": base,
        "problem_statement": "area() adds the sides instead of multiplying them.",
        "patch": diff,
        "test_patch": tests,
        "FAIL_TO_PASS": ["tests/test_size.py::test_area"],
        "PASS_TO_PASS": ["tests/test_size.py::test_square"],
        "test_cmd": "python -m pytest -q",
        "split": "train",
        **extra,
    }


def write_jsonl(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_your_own_repo_at_its_base_commit_is_a_valid_task(tmp_path: Path, isolated_cache: Path):
    """The record points at the working clone (HEAD has the fix and the tests) and names the buggy commit:
    the task starts from that commit's tree, with no history holding the fix, and validates."""
    repo, base = own_repo(tmp_path)
    tasks = write_jsonl(tmp_path / "mine.jsonl", record(repo, base))
    source = load_source(f"{tasks}:train")
    task = source.materialize(source.get("me__shapes-1"))
    checkout = Path(task.repo_path or "")
    assert checkout != repo.resolve() and (checkout / "shapes" / "size.py").read_text() == BUGGY
    assert not (checkout / "tests").exists() and _git(checkout, "rev-list", "--count", "HEAD").strip() == "1"
    assert source.materialize(source.get("me__shapes-1")).repo_path == task.repo_path  # built once
    out = CliRunner().invoke(tasks_group, ["validate", str(tasks), "--no-sandbox"])
    assert out.exit_code == 0, out.output
    assert "1/1 instances valid" in out.output


def test_an_unknown_base_commit_fails_that_task_only(tmp_path: Path, isolated_cache: Path):
    repo, base = own_repo(tmp_path)
    bad = {**record(repo, base), "instance_id": "me__shapes-2", "base_commit": "0" * 40}
    tasks = write_jsonl(tmp_path / "mine.jsonl", record(repo, base), bad)
    out = CliRunner().invoke(tasks_group, ["validate", str(tasks), "--no-sandbox"])
    assert out.exit_code == 1, out.output
    assert f"me__shapes-2 [-]: TaskError: task me__shapes-2: base_commit {'0' * 40} is not a commit of" in out.output
    assert "1/2 instances valid (1 failed)" in out.output


def test_an_invalid_task_prints_the_graders_log(tmp_path: Path, isolated_cache: Path):
    repo, base = own_repo(tmp_path)
    wrong = record(repo, base)
    wrong["patch"] = wrong["patch"].replace("w * h", "w - h")
    tasks = write_jsonl(tmp_path / "mine.jsonl", wrong)
    out = CliRunner().invoke(tasks_group, ["validate", str(tasks), "--no-sandbox"])
    assert out.exit_code == 1, out.output
    # the grader finds it building the task's reference: a gold patch that fails the tests as written
    # makes the task ungradable (issue 43), with the run's log
    assert "FAIL me__shapes-1 [local]: GradingError: task me__shapes-1 cannot be graded: the gold patch" in out.output
    assert "tests/test_size.py::test_area" in out.output
    assert "assert -1 == 6" in out.output  # pytest's own words


def test_repeat_reports_consistency_and_the_flaky_rate(tmp_path: Path, isolated_cache: Path):
    repo, base = own_repo(tmp_path)
    tasks = write_jsonl(tmp_path / "mine.jsonl", record(repo, base))
    out = CliRunner().invoke(tasks_group, ["validate", str(tasks), "--no-sandbox", "--repeat", "2"])
    assert out.exit_code == 0, out.output
    assert "me__shapes-1\tconsistent\tgold [1.0, 1.0]\tbase [0.0, 0.0]\tflaky 0/2" in out.output
    assert "repeat 2: 1/1 tasks consistent; flaky tests 0/2 (0.0%)" in out.output


def test_ids_validates_only_the_listed_instances(tmp_path: Path, isolated_cache: Path):
    """--ids FILE: only those instances (comments and blank lines ignored), so a large suite can be
    validated in shards or its failures re-checked; an id the source lacks is a usage error."""
    repo, base = own_repo(tmp_path)
    bad = {**record(repo, base), "instance_id": "me__shapes-2", "base_commit": "0" * 40}
    tasks = write_jsonl(tmp_path / "mine.jsonl", record(repo, base), bad)
    ids = tmp_path / "ids.txt"
    ids.write_text("# the one that validates\n\nme__shapes-1  # first\n")
    out = CliRunner().invoke(tasks_group, ["validate", str(tasks), "--no-sandbox", "--ids", str(ids)])
    assert out.exit_code == 0, out.output
    assert "1/1 instances valid" in out.output and "me__shapes-2" not in out.output
    assert "validate 1/1 ok me__shapes-1 (0 failed, " in out.output  # no terminal: a progress line per task
    ids.write_text("me__shapes-1\nme__shapes-9\n")
    out = CliRunner().invoke(tasks_group, ["validate", str(tasks), "--no-sandbox", "--ids", str(ids)])
    assert out.exit_code == 2, out.output
    assert "--ids: 1 id(s) not in the source: me__shapes-9" in out.output


def test_record_keeps_each_verdict_and_a_rerun_resumes(tmp_path: Path, isolated_cache: Path):
    """--record FILE: a line per finished task (the per-test statuses and the log only for an invalid one);
    the same command again grades nothing and reports the same totals; a torn last line (a killed run),
    an edited task or another --repeat is graded again."""
    repo, base = own_repo(tmp_path)
    bad = {**record(repo, base), "instance_id": "me__shapes-2", "base_commit": "0" * 40}
    tasks = write_jsonl(tmp_path / "mine.jsonl", record(repo, base), bad)
    rec = tmp_path / "verdicts" / "record.jsonl"
    args = ["validate", str(tasks), "--no-sandbox", "--record", str(rec)]
    first = CliRunner().invoke(tasks_group, args)
    assert first.exit_code == 1, first.output
    assert "record " + str(rec) + ": 0 of 2 task(s) already validated with --repeat 1, 2 to go" in first.output
    lines = [json.loads(line) for line in rec.read_text().splitlines()]
    assert [(x["instance_id"], x["ok"], x["repeat"]) for x in lines] == [
        ("me__shapes-1", True, 1),
        ("me__shapes-2", False, 1),
    ]
    good, failed = lines
    assert good["rewards"] == {"gold": [1.0], "base": [0.0]} and good["gold"] == {} and good["log"] == ""
    assert good["consistent"] and good["seconds"] > 0 and len(good["fingerprint"]) == 16
    assert failed["reason"].startswith("TaskError: task me__shapes-2: base_commit") and failed["log"]

    again = CliRunner().invoke(tasks_group, args)
    assert again.exit_code == 1, again.output
    assert "2 of 2 task(s) already validated with --repeat 1, 0 to go" in again.output
    assert "FAIL (recorded) me__shapes-2: TaskError" in again.output
    assert "1/2 instances valid (1 failed)" in again.output
    assert len(rec.read_text().splitlines()) == 2  # nothing graded, nothing appended

    rec.write_text(rec.read_text().splitlines()[0] + "\n" + '{"format": 1, "instance_id": "me__sha')
    wrong = record(repo, base)
    wrong["patch"] = wrong["patch"].replace("w * h", "w - h")
    write_jsonl(tasks, wrong, bad)  # me__shapes-1 edited: its old verdict does not count
    edited = CliRunner().invoke(tasks_group, args)
    assert "0 of 2 task(s) already validated with --repeat 1, 2 to go; 1 torn line(s) ignored" in edited.output
    assert "0/2 instances valid (2 failed)" in edited.output
    newest = [json.loads(line) for line in rec.read_text().splitlines()[-2:]]
    assert [(x["instance_id"], x["ok"]) for x in newest] == [("me__shapes-1", False), ("me__shapes-2", False)]
    # the edited gold patch fails the tests as written: the grader says the task cannot be graded, naming the test
    assert newest[0]["reason"].startswith("GradingError") and "tests/test_size.py::test_area" in newest[0]["reason"]

    twice = CliRunner().invoke(tasks_group, [*args, "--repeat", "2"])
    assert "0 of 2 task(s) already validated with --repeat 2, 2 to go" in twice.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nonsense"], "unknown task source 'nonsense'"),
        (["builtin", "--no-sandbox", "--sandbox", "docker"], "cannot go with --sandbox docker"),
        (["builtin", "--repeat", "0"], "Invalid value for '--repeat'"),
        (["HARBOR", "--no-sandbox"], "runs on docker; unsafe_no_isolation is for the local backend only"),
    ],
)
def test_usage_errors_exit_2_before_any_grading(tmp_path: Path, args: list[str], message: str):
    harbor = tmp_path / "harbor" / "t"
    (harbor / "tests").mkdir(parents=True)
    (harbor / "task.toml").write_text('version = "1.0"\n')
    (harbor / "instruction.md").write_text("do it\n")
    (harbor / "tests" / "test.sh").write_text("exit 1\n")
    (harbor / "environment").mkdir()
    (harbor / "environment" / "Dockerfile").write_text("FROM scratch\nWORKDIR /app\n")
    out = CliRunner().invoke(tasks_group, ["validate", *[str(harbor) if a == "HARBOR" else a for a in args]])
    assert out.exit_code == 2, out.output
    assert message in out.output
