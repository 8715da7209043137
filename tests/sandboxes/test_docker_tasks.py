"""Tasks that bring their own image, end to end on the real docker backend: Harbor task directories
(graded by their own tests/test.sh) and a SWE-bench-style instance whose repo lives at /testbed in its
image. Needs a running engine and the test image (.ci/docker-setup.sh); the SWE-bench image is built
from a real project's sdist, which pip downloads from PyPI (the test skips, saying so, without it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lego.conductor.cli.main import cli
from lego.conductor.cli.tasks import tasks_group
from lego.config import SandboxConfig
from lego.engines.oracle import plan_reply
from lego.errors import GradingError
from lego.harnesses.lego_agent.agent import TOOLS as LEGO_TOOLS
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.grading import grade
from lego.sandboxes.verifier import grade_verifier, is_harbor
from lego.tasks.diffs import file_diff, new_file_diff
from lego.tasks.harbor import HarborSource
from lego.tasks.harbor_export import export_task
from lego.tasks.sources import JsonlSource, StarterSource
from lego.tasks.validate import backend_for, validate_task
from lego.types import RequestContext, Task

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("LEGO_DOCKER_TEST_IMAGE", "lego-test-bookworm:latest")


@pytest.fixture(scope="module")
def client() -> Any:
    try:
        from lego.sandboxes.docker import docker_client

        c = docker_client()
        c.images.get(IMAGE)
    except Exception as exc:
        pytest.skip(f"no Docker engine or no {IMAGE} image ({exc}); run .ci/docker-setup.sh")
    return c


@pytest.fixture(scope="module")
def cfg() -> SandboxConfig:
    return SandboxConfig(kind="docker", max_processes=64, command_timeout_s=120)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private lego cache for the module (materialised repos, sandbox templates)."""
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEGO_CACHE_DIR", str(path))
        yield path


# ---------------------------------------------------------------- Harbor: a lego task, exported and read back


@pytest.fixture(scope="module")
def exported(client: Any, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Task]:
    """A generated starter task written as a Harbor directory, read back by the Harbor source and built."""
    starter = StarterSource()
    out = tmp_path_factory.mktemp("harbor")
    export_task(starter.materialize(starter.records()[0]), out, base_image=IMAGE)
    source = HarborSource(out)
    (task,) = source.records()
    return out, source.materialize(task)


def test_an_exported_task_round_trips_oracle_1_empty_0(exported: tuple[Path, Task], cfg: SandboxConfig):
    _, task = exported
    assert is_harbor(task) and task.image and task.metadata["repo_dir"] == "/testbed"
    gold = grade_verifier(task, task.patch, cfg=cfg)  # solution/solve.sh played in a fresh sandbox, its diff graded
    assert (gold.reward, gold.resolved) == (1.0, True), gold.log
    assert "1/1 named tests passed" in gold.log and "reward 1.0 from /logs/verifier/reward.txt" in gold.log
    empty = grade_verifier(task, "", cfg=cfg)
    assert (empty.reward, empty.resolved) == (0.0, False), empty.log
    assert "0/1 named tests passed" in empty.log


def test_the_oracle_plays_solve_sh_through_the_agents_shell(exported: tuple[Path, Task], cfg: SandboxConfig):
    """What the oracle sends lego-agent's bash tool, run as the agent in the task's container, leaves a diff
    that grades 1; the hidden tests are nowhere in that container."""
    _, task = exported
    reply = plan_reply(RequestContext(messages=[{"role": "user", "content": "fix"}], tools=LEGO_TOOLS), task.patch)
    assert reply.tool == "bash"
    sb = create_sandbox(cfg, task)
    try:
        assert sb.repo_dir == "/testbed" and sb.history_strip
        assert sb.exec("ls -A /tests /logs/verifier").stdout.split() == ["/logs/verifier:", "/tests:"]
        run = sb.exec(reply.arguments["command"])
        assert run.exit_code == 0, run.stderr
        sb.kill_agent_processes()
        diff = sb.diff()
    finally:
        sb.close()
    assert diff.startswith("diff --git") and grade_verifier(task, diff, cfg=cfg).reward == 1.0


def test_validate_repeats_an_exported_task_on_docker(exported: tuple[Path, Task]):
    out, _ = exported
    result = CliRunner().invoke(tasks_group, ["validate", str(out), "--repeat", "2"])
    assert result.exit_code == 0, result.output
    assert "\tconsistent\tgold [1.0, 1.0]\tbase [0.0, 0.0]\tflaky 0/1" in result.output
    assert "1/1 tasks consistent; flaky tests 0/1 (0.0%)" in result.output
    assert "1/1 instances valid" in result.output


# ---------------------------------------------------------------- Harbor: a hand-written task and its verifier

_TEST_SH = """#!/bin/bash
set -e
python3 -c "import mod"
python3 - <<'EOF'
import json, mod
json.dump({"reward": 1.0 if mod.answer() == 42 else 0.25, "style": 1}, open("/logs/verifier/reward.json", "w"))
EOF
"""


def _handwritten(root: Path, name: str, test_sh: str = _TEST_SH) -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\n\n[verifier]\ntimeout_sec = 60.0\n'
    )
    (d / "instruction.md").write_text("`answer()` in mod.py should return 42.\n")
    (d / "environment" / "Dockerfile").write_text(
        f"FROM {IMAGE}\nWORKDIR /app\nCOPY mod.py /app/mod.py\nRUN mkdir -p pkg && touch pkg/__init__.py\n"
    )
    (d / "environment" / "mod.py").write_text("def answer():\n    return 41\n")
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\nsed -i 's/41/42/' mod.py\n")
    return d


@pytest.fixture(scope="module")
def handwritten(client: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    root = tmp_path_factory.mktemp("handwritten")
    _handwritten(root, "partial")
    _handwritten(root, "broken", test_sh="#!/bin/bash\necho 'the verifier crashed' >&2\nexit 3\n")
    source = HarborSource(root)
    return {t.instance_id: source.materialize(t) for t in source.records()}


def test_reward_json_partial_credit_and_a_diff_that_breaks_the_verifier(
    handwritten: dict[str, Task], cfg: SandboxConfig
):
    task = handwritten["partial"]
    assert task.metadata["repo_dir"] == "/app" and task.metadata["difficulty"] == "easy"
    gold = grade_verifier(task, task.patch, cfg=cfg)
    assert (gold.reward, gold.resolved) == (1.0, True) and "from /logs/verifier/reward.json" in gold.log
    assert grade_verifier(task, "", cfg=cfg).reward == 0.25
    crash = file_diff("mod.py", "def answer():\n    return 41\n", "raise SystemExit(3)\n")
    broken = grade_verifier(task, crash, cfg=cfg)
    assert broken.reward == 0.0
    assert "the verifier wrote no reward with the agent's diff (on the pristine repo it wrote 0.25)" in broken.log
    sneaky = new_file_diff("reward.txt", "1\n")  # only source edits are in the graded diff
    assert grade_verifier(task, sneaky, cfg=cfg).excluded_files == ["reward.txt (new file that is not Python source)"]


def test_a_verifier_that_cannot_run_is_infrastructure(handwritten: dict[str, Task], cfg: SandboxConfig):
    task = handwritten["broken"]
    with pytest.raises(GradingError, match=r"writes no reward on the pristine repo either(.|\n)*the verifier crashed"):
        grade_verifier(task, "", cfg=cfg)
    fix = file_diff("mod.py", "def answer():\n    return 41\n", "def answer():\n    return 42\n")
    with pytest.raises(GradingError, match="writes no reward on the pristine repo either"):
        grade_verifier(task, fix, cfg=cfg)
    with pytest.raises(GradingError, match=r"needs sandbox\.kind=docker"):
        grade_verifier(task, "", cfg=SandboxConfig())
    result = validate_task(task, cfg)
    assert not result.ok and "GradingError" in result.reason and "the verifier crashed" in result.log


# ---------------------------------------------------------------- SWE-bench: a real project at /testbed in its image

PROJECT = "cachetools==5.3.3"
INSTANCE = "tkem__cachetools-lru-recency"
SWE_IMAGE = "lego-test/sweb.eval.x86_64.tkem_1776_cachetools-lru-recency:latest"
ENV = "/opt/miniconda3/envs/testbed"
LRU_GETITEM = """class LRUCache(Cache):
    \"\"\"Least Recently Used (LRU) cache implementation.\"\"\"

    def __init__(self, maxsize, getsizeof=None):
        Cache.__init__(self, maxsize, getsizeof)
        self.__order = collections.OrderedDict()

    def __getitem__(self, key, cache_getitem=Cache.__getitem__):
        value = cache_getitem(self, key)
        if key in self:  # __missing__ may not store item"""
SWE_DOCKERFILE = f"""FROM {IMAGE}
# SWE-bench's layout: the project's repo at /testbed (one commit), its env activated (first on PATH),
# the project installed in it editable (a .pth naming the src/ layout's root, as pip install -e writes).
RUN python3 -m venv --system-site-packages --without-pip {ENV}
ENV PATH={ENV}/bin:/usr/local/bin:/usr/bin:/bin
COPY testbed/ /testbed/
WORKDIR /testbed
RUN git init -q && git add -A && git -c user.name=swe -c user.email=swe@localhost commit -q -m base \\
 && echo /testbed/src > {ENV}/lib/python3.11/site-packages/__editable__.cachetools-5.3.3.pth \\
 && python -c "import cachetools; assert cachetools.__file__.startswith('/testbed/src/'), cachetools.__file__"
"""
LRU_TESTS = [
    "defaults",
    "delete",
    "getsizeof_param",
    "getsizeof_subclass",
    "insert",
    "lru_getsizeof",
    "missing",
    "pickle",
    "pickle_maxsize",
    "pop",
    "popitem",
    "popitem_exception_context",
    "update",
]


def _sdist(dest: Path) -> Path:
    run = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", PROJECT, "-d", str(dest)],
        capture_output=True,
        text=True,
    )
    found = sorted(dest.glob("*.tar.gz"))
    if run.returncode != 0 or not found:
        pytest.skip(f"cannot download the {PROJECT} sdist from PyPI: {run.stderr.strip()[-300:]}")
    return found[0]


@pytest.fixture(scope="module")
def swe_task(client: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Task]:
    """A SWE-bench-format record for a real bug class in cachetools (an inverted condition: reading an LRU
    entry no longer refreshes it), its image built here FROM the test image (no registry is reachable)."""
    work = tmp_path_factory.mktemp("swe")
    with tarfile.open(_sdist(work / "sdist")) as tar:
        tar.extractall(work / "unpacked", filter="data")
    repo = next((work / "unpacked").iterdir()).rename(work / "testbed")
    module = repo / "src" / "cachetools" / "__init__.py"
    fixed = module.read_text()
    assert fixed.count(LRU_GETITEM) == 1
    buggy = fixed.replace(LRU_GETITEM, LRU_GETITEM.replace("if key in self:", "if key not in self:"))
    module.write_text(buggy)
    hidden = repo / "tests" / "test_lru.py"
    test_patch = new_file_diff("tests/test_lru.py", hidden.read_text())
    hidden.unlink()  # SWE-bench's test_patch: the tests that come with the fix, never in the image
    (work / "Dockerfile").write_text(SWE_DOCKERFILE)
    client.images.build(path=str(work), tag=SWE_IMAGE, rm=True, forcerm=True)
    record = {
        "instance_id": INSTANCE,
        "repo": "tkem/cachetools",
        "base_commit": "",
        "problem_statement": "LRUCache: reading an entry does not make it the most recently used one, so a "
        "recently read key is evicted before keys nobody read.",
        "patch": file_diff("src/cachetools/__init__.py", buggy, fixed),
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(
            ["tests/test_lru.py::LRUCacheTest::test_lru", "tests/test_lru.py::LRUCacheTest::test_missing_getsizeof"]
        ),
        "PASS_TO_PASS": json.dumps(
            [f"tests/test_lru.py::LRUCacheTest::test_{n}" for n in LRU_TESTS]
            + ["tests/test_fifo.py::LRUCacheTest::test_fifo"]  # sic: the project's FIFO test class is named so
        ),
        "version": "5.3",
        "image_name": SWE_IMAGE,
    }
    jsonl = work / "swe.jsonl"
    jsonl.write_text(json.dumps(record) + "\n")
    source = JsonlSource(jsonl, strict=True)
    return jsonl, source.materialize(source.get(INSTANCE))


def test_a_swebench_image_task_at_testbed_grades_gold_1_empty_0(swe_task: tuple[Path, Task], cfg: SandboxConfig):
    _, task = swe_task
    assert task.image == SWE_IMAGE and not task.repo_path and backend_for(task) == "docker"
    gold = grade(task, task.patch, cfg=cfg)
    assert (gold.reward, gold.resolved) == (1.0, True), gold.log
    assert set(gold.tests.values()) == {"passed"}
    empty = grade(task, "", cfg=cfg)
    assert empty.reward == 0.0, empty.log
    assert empty.tests["tests/test_lru.py::LRUCacheTest::test_lru"] != "passed"
    assert empty.tests["tests/test_lru.py::LRUCacheTest::test_insert"] == "passed"


def test_validate_picks_docker_for_an_image_task(swe_task: tuple[Path, Task]):
    jsonl, _ = swe_task
    out = CliRunner().invoke(tasks_group, ["validate", str(jsonl)])
    assert out.exit_code == 0, out.output
    assert "1/1 instances valid" in out.output


# ---------------------------------------------------------------- `lego run`: the oracle through lego-agent


def _lego_run(model: Path, tmp_path: Path, tasks: Path, task_id: str) -> dict[str, str]:
    args = ["run", "--engine", "oracle", "--model", str(model), "--tasks", str(tasks), "--task", task_id]
    args += ["--max-turns", "6", "--timeout", "300", "--out", str(tmp_path / "t.json"), "-o", "sandbox.kind=docker"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    return {ln.split(maxsplit=1)[0]: ln.split(maxsplit=1)[1] for ln in res.output.splitlines() if " " in ln.strip()}


def test_lego_run_plays_the_gold_patch_at_testbed(swe_task: tuple[Path, Task], tiny_model_dir: Path, tmp_path: Path):
    jsonl, task = swe_task
    lines = _lego_run(tiny_model_dir, tmp_path, jsonl, task.instance_id)
    assert lines["termination"] == "completed (policy: the harness finished; the diff was graded)", lines
    assert lines["reward"] == "1.0" and lines["tests"] == "16/16 passed", lines


def test_lego_run_plays_solve_sh_in_a_harbor_task(exported: tuple[Path, Task], tiny_model_dir: Path, tmp_path: Path):
    out, task = exported
    lines = _lego_run(tiny_model_dir, tmp_path, out, task.instance_id)
    assert lines["reward"] == "1.0" and lines["tests"] == "1/1 passed", lines
