"""The eval runner: bounded concurrency, per-sample atomic files, infra retries, and resume after
SIGKILL that gives the same report as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lego.config import LegoConfig
from lego.errors import ResumeError
from lego.eval.results import EvalSpec, PolicySpec, SampleKey, SampleResult, load_results, sample_path
from lego.eval.runner import collect_samples, run_eval
from lego.io import read_jsonl
from lego.types import Task

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import deterministic_rollout as det  # noqa: E402


def write_tasks(path: Path, n: int) -> Path:
    lines = [
        Task(
            instance_id=f"demo__t{i:02d}", repo="demo/calc", problem_statement=f"fix bug {i}", patch="", split="heldout"
        ).model_dump_json()
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_spec(n_tasks: int = 6, samples: int = 2) -> EvalSpec:
    return EvalSpec(
        policies=[PolicySpec(name="base", model="m"), PolicySpec(name="rl", model="ck", base="base")],
        harnesses=["h1", "h2"],
        task_ids=[f"demo__t{i:02d}" for i in range(n_tasks)],
        samples=samples,
        seed=3,
        bootstrap=200,
    )


def test_run_eval_writes_every_sample_retries_infra_and_excludes_it_from_pass1(tmp_path: Path) -> None:
    spec = make_spec()
    tasks = {t: Task(instance_id=t, repo="r", problem_statement="p", patch="") for t in spec.task_ids}
    res = run_eval(spec, det.factory(spec, tasks, tmp_path, LegoConfig()), tmp_path, concurrency=3, infra_retries=1)
    assert len(res.samples) == len(spec.keys()) == 48 and res.missing == 0
    for s in res.samples:
        assert sample_path(tmp_path, s.key).is_file()
        if det.permanent_infra(s.key):
            assert s.infra and s.termination == "env_error" and s.attempts == 2 and not s.passed
        elif det.transient_infra(s.key):
            assert not s.infra and s.attempts == 2
        else:
            assert s.attempts == 1
    n_perm = sum(det.permanent_infra(k) for k in spec.keys())
    assert n_perm > 0 and sum(c.n_infra for c in res.cells) == n_perm
    for c in res.cells:
        scored = [s for s in res.samples if (s.key.policy, s.key.harness) == (c.policy, c.harness) and not s.infra]
        by_task: dict[str, list[float]] = {}
        for s in scored:
            by_task.setdefault(s.key.task_id, []).append(float(s.passed))
        expected = sum(sum(v) / len(v) for v in by_task.values()) / len(by_task)
        assert c.pass1 == pytest.approx(expected)
        assert c.ci_low <= c.pass1 <= c.ci_high
        assert sorted(c.pass_at_k) == [1, 2] and c.pass_at_k[1] == pytest.approx(c.pass1)
        assert c.infra_rate == pytest.approx(c.n_infra / c.n_samples)
    assert {(d.policy, d.base, d.harness) for d in res.deltas} == {("rl", "base", "h1"), ("rl", "base", "h2")}
    assert load_results(tmp_path) == res

    def must_not_run(key: SampleKey) -> SampleResult:
        raise AssertionError(f"{key} was already done")

    assert run_eval(spec, must_not_run, tmp_path) == res  # a rerun runs nothing and gives the same result


def test_infra_samples_can_be_retried_on_rerun_and_a_wrong_key_is_refused(tmp_path: Path) -> None:
    spec = make_spec(n_tasks=2, samples=1)
    calls: list[SampleKey] = []

    def always_infra(key: SampleKey) -> SampleResult:
        calls.append(key)
        return SampleResult.infra_failure(key, "no sandbox", attempts=1, label="env_error")

    res = run_eval(spec, always_infra, tmp_path, infra_retries=2, concurrency=1)
    assert len(calls) == 3 * len(spec.keys()) and all(s.infra and s.attempts == 3 for s in res.samples)
    assert all(c.n_tasks == 0 and c.n_infra == 2 for c in res.cells)

    def passes(key: SampleKey) -> SampleResult:
        return SampleResult(key=key, passed=True, reward=1.0)

    res2 = run_eval(spec, passes, tmp_path, retry_recorded_infra=True)
    assert all(c.pass1 == 1.0 and c.n_infra == 0 for c in res2.cells)

    def wrong_key(key: SampleKey) -> SampleResult:
        return SampleResult(key=key.model_copy(update={"sample": 99}), passed=True)

    with pytest.raises(ValueError, match="asked for"):
        run_eval(make_spec(n_tasks=3, samples=1), wrong_key, tmp_path / "other")


def test_rerun_with_another_seed_or_model_is_refused(tmp_path: Path) -> None:
    spec = make_spec(n_tasks=1, samples=1)
    run_eval(spec, lambda k: SampleResult(key=k, passed=False), tmp_path)
    with pytest.raises(ResumeError, match="--seed 3, not 4"):
        run_eval(spec.model_copy(update={"seed": 4}), lambda k: SampleResult(key=k, passed=False), tmp_path)
    with pytest.raises(ResumeError, match=r"--temperature 1\.0, not 0\.0"):
        run_eval(spec.model_copy(update={"temperature": 0.0}), lambda k: SampleResult(key=k, passed=False), tmp_path)
    moved = spec.model_copy(update={"policies": [PolicySpec(name="base", model="other")]})
    with pytest.raises(ResumeError, match="policy 'base'"):
        run_eval(moved, lambda k: SampleResult(key=k, passed=False), tmp_path)


def test_a_name_keeps_its_model_across_runs_that_do_not_name_it(tmp_path: Path) -> None:
    """Runs may add policies to a directory; a name, once sampled there, keeps meaning its model even
    when a run in between did not name it."""
    spec = make_spec(n_tasks=1, samples=1)

    def fails(key: SampleKey) -> SampleResult:
        return SampleResult(key=key, passed=False)

    run_eval(spec, fails, tmp_path)
    run_eval(spec.model_copy(update={"policies": [PolicySpec(name="other", model="m2")]}), fails, tmp_path)
    moved = spec.model_copy(update={"policies": [PolicySpec(name="base", model="m3")]})
    with pytest.raises(ResumeError, match="policy 'base'"):
        run_eval(moved, fails, tmp_path)


def _cli(out: Path, tasks: Path, calls: Path, sleep: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "LEGO_TEST_CALLS_LOG": str(calls),
        "LEGO_TEST_SAMPLE_SLEEP": sleep,
    }
    argv = [sys.executable, "-m", "lego.conductor.cli.main", "eval", "--policy", "oracle", "--policy", "base=m",
            "--policy", "rl=ck", "--base", "rl=base", "--harness", "lego-agent", "--harness", "aider",
            "--harness", "mini-swe-agent", "--tasks", f"{tasks}:heldout", "--samples", "2", "--seed", "11",
            "--concurrency", "3", "--bootstrap", "300", "--out", str(out),
            "--sample-fn", "deterministic_rollout:factory"]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_halfway_then_rerun_equals_uninterrupted_run(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 5)
    total = 3 * 3 * 5 * 2
    ref = _cli(tmp_path / "ref", tasks, tmp_path / "ref_calls.jsonl", "0")
    assert ref.wait(timeout=120) == 0, ref.stderr.read().decode() if ref.stderr else ""
    assert ref.stderr is not None
    # stderr is a pipe, not a terminal: a progress line per tenth of the samples reaches a log
    ticks = [ln.strip() for ln in ref.stderr.read().decode().splitlines() if " samples: " in ln]
    assert len(ticks) == 10 and ticks[-1].startswith(f"{total}/{total} samples: ")

    out = tmp_path / "killed"
    proc = _cli(out, tasks, tmp_path / "calls1.jsonl", "0.05")
    deadline = time.monotonic() + 120
    while len(list(out.glob("samples/*/*/*/*.json"))) < total // 2:
        assert proc.poll() is None and time.monotonic() < deadline, "eval ended before it could be killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    survived = {p.relative_to(out) for p in out.glob("samples/*/*/*/*.json")}
    assert total // 2 <= len(survived) < total
    assert not (out / "results.json").exists()

    rerun = _cli(out, tasks, tmp_path / "calls2.jsonl", "0")
    assert rerun.wait(timeout=120) == 0, rerun.stderr.read().decode() if rerun.stderr else ""
    assert rerun.stderr is not None
    left = total - len(survived)  # the rerun counts the samples it still has to draw
    assert (
        [ln for ln in rerun.stderr.read().decode().splitlines() if " samples: " in ln][-1]
        .strip()
        .startswith(f"{left}/{left} samples: ")
    )
    rerun_keys = {SampleKey.model_validate(k) for k in read_jsonl(tmp_path / "calls2.jsonl")}
    assert rerun_keys, "the rerun must finish the missing samples"
    assert not {sample_path(out, k).relative_to(out) for k in rerun_keys} & survived, "a finished sample was re-run"

    for name in ["results.json", "cells.csv", "report.md", "report.html", "pass1_heatmap.png"]:
        assert (out / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    res = json.loads((out / "results.json").read_text())
    assert len(res["samples"]) == total and res["missing"] == 0
    spec = EvalSpec.model_validate(res["spec"])
    assert len(collect_samples(out, spec)) == total
    oracle = [c for c in res["cells"] if c["policy"] == "oracle"]
    assert [c["pass1"] for c in oracle] == [1.0, 1.0, 1.0]


def test_an_eval_directory_another_process_holds_is_refused_naming_it(tmp_path: Path) -> None:
    """Issue 45: one process an eval directory; the lock is the kernel's, so a killed holder frees it."""
    from lego.errors import ConfigError

    hold = "from lego.io import DirLock; import sys, time; lock = DirLock(sys.argv[1], 'x'); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    spec = make_spec(n_tasks=1, samples=1)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
            run_eval(spec, lambda k: SampleResult(key=k, passed=False), tmp_path)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert run_eval(spec, lambda k: SampleResult(key=k, passed=True), tmp_path).cells
