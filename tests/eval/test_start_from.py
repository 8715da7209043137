"""`--start-from`: a second learning bench run reuses the first's start samples, and only those."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from lego.conductor.bench.learn import compare_to_start, copy_start, sweep_start
from lego.config import load_config
from lego.errors import ConfigError
from lego.tasks.sources import load_tasks


class Counting:
    """The sweeps' sample function (a SampleFnFactory): every other sample passes, no model; counts samples."""

    def __init__(self) -> None:
        self.samples: list[str] = []

    def __call__(self, spec: Any, tasks: Any, out_dir: Path, cfg: Any) -> Any:
        from lego.eval.results import SampleResult

        def run_sample(key: Any) -> Any:
            self.samples.append(key.policy)
            return SampleResult(key=key, passed=key.sample % 2 == 0, reward=float(key.sample % 2 == 0))

        return run_sample


def _run(out: Path, factory: Counting, cfg: Any, tasks: list[Any], checkpoint: Path) -> dict[str, Any]:
    report: dict[str, Any] = {}
    console = Console(stderr=True, quiet=True)
    sweep_start(cfg, tasks, out, 1, factory, console, report)
    compare_to_start(cfg, cfg.engine.model, checkpoint, tasks, out, 1, factory, console, report)
    return report


@pytest.fixture()
def bench() -> tuple[Any, list[Any]]:
    overrides = ["eval.temperatures=[0.8, 1.0]", "eval.sweep_samples=2", "eval.confirm_samples=2",
                 "eval.pass_at_k=[1]", "eval.bootstrap=100"]  # fmt: skip
    return load_config(None, overrides), load_tasks("boundary:heldout", limit=2)


def test_a_second_run_reuses_the_first_runs_start_samples_and_only_those(bench: Any, tmp_path: Path) -> None:
    cfg, tasks = bench
    first, second = Counting(), Counting()
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, first, cfg, tasks, a / "train" / "step_000003")
    assert first.samples.count("start") == 2 * 2 * 2 + 2 * 2  # the sweep (2 T x 2 tasks x 2) and the confirm

    copied = copy_start(a, b)
    assert copied > 0 and not list((b / "eval").glob("*/samples/trained"))
    report = _run(b, second, cfg, tasks, b / "train" / "step_000005")
    assert "start" not in second.samples and second.samples.count("trained") == first.samples.count("trained")
    assert report["comparison"]["best_vs_best"]["delta"] == 0.0
    assert copy_start(a, b / "again") > 0 and copy_start(a, b / "again") == 0  # a retried command copies nothing twice
    with pytest.raises(ConfigError, match="already holds samples of"):
        copy_start(a, b)  # b holds its own trained policy now
    with pytest.raises(ConfigError, match="no start samples"):
        copy_start(tmp_path / "nothing", tmp_path / "c")


def test_a_copied_eval_directory_with_another_runs_trained_policy_stops_before_any_sample(
    bench: Any, tmp_path: Path
) -> None:
    """A whole OUT/eval copied (what the docs said to do): the name `trained` is bound to the other run's
    checkpoint there, so the comparison would stop with a ResumeError after all the training. It is
    refused at once instead, naming --start-from."""
    import shutil

    cfg, tasks = bench
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, Counting(), cfg, tasks, a / "train" / "step_000003")
    shutil.copytree(a / "eval", b / "eval")
    late = Counting()
    with pytest.raises(ConfigError, match=r"another run's trained policy.*--start-from"):
        _run(b, late, cfg, tasks, b / "train" / "step_000001")
    assert late.samples == []
