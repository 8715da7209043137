"""Harbor task directories read as lego tasks, the script answer the oracle plays, and the export the
other way (fast: no Docker; the containers are in tests/sandboxes/test_docker_tasks.py)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from lego.engines.oracle import plan_reply
from lego.engines.script_answer import ScriptAnswer
from lego.errors import EngineError, TaskError
from lego.harnesses.lego_agent.agent import TOOLS as LEGO_TOOLS
from lego.seams import TaskSource
from lego.tasks.harbor import EPILOGUE, HarborSource, read_task_dir, workdir_of
from lego.tasks.harbor_export import export_task
from lego.tasks.sources import StarterSource, load_source
from lego.types import RequestContext

NEW_SCHEMA = """schema_version = "1.1"

[task]
name = "acme/fix-parser"
description = "Fix the parser"

[metadata]
difficulty = "easy"
tags = ["python"]

[verifier]
timeout_sec = 90.0
env = { MODE = "strict" }

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 120.0
cpus = 1
memory_mb = 2048

[solution]
env = { ANSWER = "42 and more" }
"""

OLD_SCHEMA = """version = "1.0"

[metadata]
author_name = "Someone"
difficulty = "hard"
category = "programming"
split = "heldout"
"""

DOCKERFILE = """FROM lego-test-bookworm:latest AS base
WORKDIR /src
FROM base
# the repo the agent works in
WORKDIR /app
RUN echo 'x = 1' > mod.py \\
    && true
WORKDIR pkg
"""


def harbor_task(root: Path, name: str, toml: str = NEW_SCHEMA, dockerfile: str | None = DOCKERFILE) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "task.toml").write_text(toml)
    (d / "instruction.md").write_text(f"Make {name} work.\n")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (d / "solution" / "solve.sh").write_text(
        '#!/bin/bash\necho "$ANSWER" > answer.txt\ncat "$(dirname "$0")/data.txt" >> answer.txt\n'
    )
    (d / "solution" / "data.txt").write_text("from the solution dir\n")
    if dockerfile is not None:
        (d / "environment").mkdir()
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    return d


def test_a_task_dir_maps_onto_a_task(tmp_path: Path):
    task = read_task_dir(harbor_task(tmp_path, "fix-parser"))
    assert task.instance_id == "acme__fix-parser" and task.repo == "acme/fix-parser"
    assert task.problem_statement == "Make fix-parser work.\n"
    assert task.dockerfile is not None and task.dockerfile.startswith(DOCKERFILE) and task.dockerfile.endswith(EPILOGUE)
    assert task.metadata["repo_dir"] == "/app/pkg"  # the final stage's WORKDIRs, resolved
    harbor = task.metadata["harbor"]
    assert harbor["task_dir"] == str((tmp_path / "fix-parser").resolve())
    assert (harbor["verifier_timeout_sec"], harbor["agent_timeout_sec"], harbor["build_timeout_sec"]) == (90, 300, 120)
    assert harbor["verifier_env"] == {"MODE": "strict"}
    assert task.metadata["difficulty"] == "easy" and "tags" not in task.metadata  # scalars only, for tasks.where
    answer = ScriptAnswer.decode(task.patch)
    assert answer is not None and answer.env == {"ANSWER": "42 and more"}
    assert set(answer.files()) == {"solve.sh", "data.txt"}
    assert not task.test_patch and not task.FAIL_TO_PASS  # the verifier is tests/, never in the repo


def test_the_first_schema_and_a_prebuilt_image(tmp_path: Path):
    d = harbor_task(tmp_path, "old-one", OLD_SCHEMA + '\n[environment]\ndocker_image = "acme/env:1"\n', dockerfile=None)
    task = read_task_dir(d)
    assert task.instance_id == "old-one" and task.repo == "harbor/old-one" and task.split == "heldout"
    assert task.dockerfile is not None and task.dockerfile.startswith("FROM acme/env:1\n")
    assert "repo_dir" not in task.metadata  # the image's own WORKDIR, read when it is built
    assert task.metadata["harbor"]["verifier_timeout_sec"] == 600.0  # Harbor's default


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("task.toml", "has no task.toml"),
        ("instruction.md", "instruction.md is missing"),
        ("tests/test.sh", "tests/test.sh is missing"),
        ("environment/Dockerfile", "environment/Dockerfile is missing and task.toml names no"),
    ],
)
def test_what_a_task_dir_lacks_is_named(tmp_path: Path, missing: str, message: str):
    d = harbor_task(tmp_path, "t")
    (d / missing).unlink()
    with pytest.raises(TaskError, match=message):
        read_task_dir(d)


def test_a_malformed_task_toml_is_named(tmp_path: Path):
    d = harbor_task(tmp_path, "t", toml="[verifier]\ntimeout_sec = 'soon'\n")
    with pytest.raises(TaskError, match=r"task.toml: not a valid Harbor task.toml"):
        read_task_dir(d)


def test_directories_splits_and_indexes_are_sources(tmp_path: Path):
    flat = tmp_path / "flat"
    harbor_task(flat, "a")
    harbor_task(flat, "b", toml=OLD_SCHEMA)
    harbor_task(flat, "broken", toml="not toml [")
    source = load_source(str(flat))
    assert isinstance(source, HarborSource) and isinstance(source, TaskSource)
    assert [t.instance_id for t in source.records()] == ["acme__fix-parser", "b"]
    assert len(source.errors) == 1 and "broken/task.toml" in str(source.errors[0])
    assert source.splits() == ["heldout"] and [t.instance_id for t in load_source(f"{flat}:heldout").records()] == ["b"]
    with pytest.raises(TaskError, match=r"has no split 'train'.*DIR/train/<task>"):
        load_source(f"{flat}:train").records()

    nested = tmp_path / "nested"
    harbor_task(nested / "train", "x", toml=OLD_SCHEMA.replace('split = "heldout"\n', ""))
    harbor_task(nested / "heldout", "y", toml=OLD_SCHEMA.replace('split = "heldout"\n', ""))
    assert {t.instance_id: t.split for t in load_source(str(nested)).records()} == {"x": "train", "y": "heldout"}
    assert [t.instance_id for t in load_source(f"{nested}:train").records()] == ["x"]
    assert [t.instance_id for t in load_source(str(nested / "train" / "x")).records()] == ["x"]  # one task dir

    index = tmp_path / "index.jsonl"
    index.write_text(
        json.dumps({"path": "nested/train/x", "split": "dev"}) + "\n" + json.dumps({"task_dir": "flat/b"}) + "\n"
    )
    assert {t.instance_id: t.split for t in load_source(str(index)).records()} == {"x": "dev", "b": "heldout"}

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"path": [str(nested / "heldout" / "y")], "split": ["test"]}), tmp_path / "index.parquet")
    assert [(t.instance_id, t.split) for t in load_source(str(tmp_path / "index.parquet")).records()] == [("y", "test")]


def test_two_tasks_of_one_name_are_reported(tmp_path: Path):
    harbor_task(tmp_path / "d", "one")
    harbor_task(tmp_path / "d", "two")  # the same [task] name
    source = HarborSource(tmp_path / "d")
    assert len(source.records()) == 1 and "is also the name of" in str(source.errors[0])
    with pytest.raises(TaskError, match="is also the name of"):
        HarborSource(tmp_path / "d", strict=True).records()


def test_workdir_of():
    assert workdir_of("FROM x\n") is None
    assert workdir_of("FROM x\nWORKDIR /a\nWORKDIR b/c\n") == "/a/b/c"
    assert workdir_of("FROM x\nWORKDIR /a\nFROM y\n") is None  # a new stage starts from its base's
    assert workdir_of('FROM x\nWORKDIR "/app"\n') == "/app"


def test_the_script_answer_runs_from_solution_or_a_temp_dir(tmp_path: Path):
    """The shell line the oracle sends: unpacks solution/ (into /solution when that is writable, else a
    fresh temp dir; /solution is not writable here) and runs solve.sh from the current directory with
    [solution] env; the same directory always encodes to the same text."""
    task = read_task_dir(harbor_task(tmp_path, "fix-parser"))
    assert read_task_dir(tmp_path / "fix-parser").patch == task.patch
    answer = ScriptAnswer.decode(task.patch)
    assert answer is not None
    work = tmp_path / "repo"
    work.mkdir()
    script = answer.command().replace("S=/solution;", f"S={tmp_path}/no-such-dir;")
    run = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (work / "answer.txt").read_text() == "42 and more\nfrom the solution dir\n"
    assert ScriptAnswer.decode("diff --git a/x b/x\n") is None
    with pytest.raises(ValueError, match="malformed script answer"):
        ScriptAnswer.decode("#!lego-script-answer/1\n{}")


def _ctx(messages: list[dict], answer: str, tools: list | None = None) -> RequestContext:
    return RequestContext(messages=messages, tools=LEGO_TOOLS if tools is None else tools, answer=answer)


def test_the_oracle_plays_a_script_answer_through_the_shell_tool(tmp_path: Path):
    answer = read_task_dir(harbor_task(tmp_path, "fix-parser")).patch
    first = plan_reply(_ctx([{"role": "user", "content": "fix it"}], answer), answer)
    script = ScriptAnswer.decode(answer)
    assert script is not None and first.tool == "bash" and first.arguments["command"] == script.command()
    done = [
        {"role": "user", "content": "fix it"},
        first.message(),
        {"role": "tool", "tool_call_id": "oracle", "content": ""},
    ]
    assert plan_reply(_ctx(done, answer), answer).tool == "submit"
    mini = plan_reply(_ctx([{"role": "user", "content": "reply in ```bash blocks"}], answer, tools=[]), answer)
    assert script.command() in mini.content
    with pytest.raises(EngineError, match="SEARCH/REPLACE blocks only"):
        plan_reply(_ctx([{"role": "user", "content": "use SEARCH/REPLACE"}], answer, tools=[]), answer)


def test_export_writes_harbors_layout_and_reads_back(tmp_path: Path, isolated_cache: Path):
    """A generated task exported (no Docker needed to write it) is a Harbor task the source reads back:
    the statement, a Dockerfile that builds the pristine repo at /testbed, the hidden tests only under
    tests/, the gold patch only under solution/."""
    source = StarterSource()
    task = source.materialize(source.records()[0])
    out = export_task(task, tmp_path / "out", base_image="lego-test-bookworm:latest")
    assert out == tmp_path / "out" / task.instance_id
    config = tomllib.loads((out / "task.toml").read_text())
    assert config["task"]["name"] == f"lego/{task.instance_id}" and config["metadata"]["split"] == task.split
    assert config["metadata"]["mutation_kind"] == task.metadata["mutation_kind"]
    spec = json.loads((out / "tests" / "tests.json").read_text())
    assert spec["tests"] == [*task.FAIL_TO_PASS, *task.PASS_TO_PASS] and spec["pytest_args"] == []
    assert (out / "tests" / "test.patch").read_text() == task.test_patch
    assert (out / "solution" / "fix.patch").read_text() == task.patch
    hidden = {p.split("/")[-1] for p in spec["tests"]}
    repo_files = {p.name for p in (out / "environment" / "repo").rglob("*")}
    assert not any(h.split("::")[0] in repo_files for h in hidden)  # the hidden tests are not in the image
    back = read_task_dir(out)
    assert back.problem_statement.strip() == task.problem_statement.strip() and back.split == task.split
    assert back.metadata["repo_dir"] == "/testbed" and back.dockerfile is not None
    assert back.dockerfile.startswith("FROM lego-test-bookworm:latest\nCOPY repo/ /testbed/\n")
    script = ScriptAnswer.decode(back.patch)
    assert script is not None and script.files()["fix.patch"].decode() == task.patch
    with pytest.raises(TaskError, match="exists; export into an empty directory"):
        export_task(task, tmp_path / "out")
    with pytest.raises(TaskError, match="is not pytest"):
        export_task(task.model_copy(update={"test_cmd": "make check"}), tmp_path / "other")


def test_show_prints_the_solution_script(tmp_path: Path):
    from click.testing import CliRunner

    from lego.conductor.cli.tasks import tasks_group

    harbor_task(tmp_path / "d", "fix-parser")
    out = CliRunner().invoke(tasks_group, ["show", "acme__fix-parser", "--source", str(tmp_path / "d")])
    assert out.exit_code == 0, out.output
    assert "--- solution: data.txt, solve.sh (a script answer) ---" in out.output and 'echo "$ANSWER"' in out.output
