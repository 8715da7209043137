"""compare_sweeps on constructed outcome grids, and run_evals (several evals through one pool)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from lego.config import load_config
from lego.eval.results import EvalSpec, PolicySpec
from lego.eval.runner import EvalJob, run_eval, run_evals
from lego.eval.sweep import ConfirmGrids, FairComparison, compare_sweeps, task_pass_at_k
from lego.types import Task

sys.path.insert(0, str(Path(__file__).parent))
import deterministic_rollout as det

TEMPS = [0.6, 0.8, 1.0, 1.2]


def _grid(rates: list[float], n_tasks: int, samples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((n_tasks, len(rates), samples)) < np.array(rates)[None, :, None]).astype(float)


def test_same_temperature_deltas_are_paired_per_temperature_and_best_vs_best_uses_each_best() -> None:
    before = _grid([0.7, 0.6, 0.5, 0.3], 30, 8, 0)
    after = before.copy()
    after[:, 3] = before[:, 0]  # trained at 1.2 samples as the start at 0.6; the rest unchanged
    cmp = compare_sweeps(before, after, TEMPS, [1, 2, 4, 8], n_boot=300, seed=0)
    best = cmp.best_vs_best
    assert best.before_temperature == 0.6 and best.after_temperature in (0.6, 1.2)
    assert best.delta == 0.0 and best.p_value == 1.0
    same = {d.temperature: d for d in cmp.same_temperature}
    assert same[0.6].delta == 0.0 and same[1.2].delta == pytest.approx(before[:, 0].mean() - before[:, 3].mean())
    assert same[1.2].ci95[0] > 0 and same[1.2].p_value < 0.01
    assert [p.pass1 for p in cmp.before] == pytest.approx(before.mean(axis=(0, 2)).tolist())
    assert FairComparison.model_validate_json(cmp.model_dump_json()) == cmp  # the JSON carries it whole


def test_infra_samples_are_left_out_and_tasks_missing_a_temperature_are_dropped() -> None:
    before = _grid([0.5] * 4, 10, 8, 1)
    after = _grid([0.5] * 4, 10, 8, 2)
    before[0, :, :3] = np.nan  # task 0 lost 3 samples per temperature to infrastructure: scored on 5
    after[1, 2, :] = np.nan  # task 1 has no scored sample at T = 1.0 for the trained policy: dropped
    cmp = compare_sweeps(before, after, TEMPS, [1, 2, 4, 8], n_boot=200, seed=0)
    assert cmp.n_tasks == 9 and cmp.n_tasks_dropped == 1
    kept = [0, *range(2, 10)]
    assert cmp.before[0].pass1 == pytest.approx(np.nanmean(before[kept, 0], axis=1).mean())
    # pass@8 is undefined for task 0 (5 scored samples): left out of that k only
    row8 = next(r for r in cmp.pass_at_k if r.k == 8)
    row4 = next(r for r in cmp.pass_at_k if r.k == 4)
    assert (row8.n_tasks, row4.n_tasks) == (8, 9)


def test_task_pass_at_k_and_the_split_half_selection() -> None:
    outcomes = np.array([[1, 0, 0, 0], [1, 1, np.nan, np.nan], [0, 0, 0, 0]], dtype=float)
    assert task_pass_at_k(outcomes, 2) == pytest.approx([0.5, 1.0, 0.0])
    assert np.isnan(task_pass_at_k(outcomes, 3)[1]) and task_pass_at_k(outcomes, 3)[0] == pytest.approx(0.75)
    # even samples favour T = 0.6 for the start, odd ones are what is scored there
    before = np.zeros((6, 4, 4))
    before[:, 0, 0::2] = 1.0
    before[:, 1, 0] = 1.0  # T = 0.8: one pass in four, on an even sample
    after = np.zeros((6, 4, 4))
    after[:, 2, :] = 0.75
    split = compare_sweeps(before, after, TEMPS, [1, 2], n_boot=200, seed=0).best_vs_best.split
    assert split is not None
    assert (split.before_temperature, split.after_temperature) == (0.6, 1.0)
    assert (split.scored.before, split.scored.after) == (0.0, 0.75)


def test_the_confirm_stage_scores_best_vs_best_and_pass_at_k_on_its_fresh_samples() -> None:
    """A sweep whose best temperature is best by luck: its own samples flatter both policies alike, the
    fresh samples at the chosen temperatures are what best-vs-best and pass@k are scored on."""
    before = _grid([0.5, 0.5, 0.5, 0.5], 40, 2, 3)
    after = _grid([0.5, 0.5, 0.5, 0.5], 40, 2, 4)
    rng = np.random.default_rng(5)
    fresh_before = (rng.random((40, 8)) < 0.5).astype(float)
    fresh_after = (rng.random((40, 8)) < 0.8).astype(float)
    fresh_before[0, :2] = np.nan  # infrastructure: task 0 has 6 fresh samples, so no pass@8 of its own
    confirm = ConfirmGrids(0.8, 1.0, fresh_before, fresh_after)
    cmp = compare_sweeps(before, after, TEMPS, [1, 2, 4, 8], n_boot=300, seed=0, confirm=confirm)
    c = cmp.confirmed
    assert c is not None and (c.before_temperature, c.after_temperature, c.samples) == (0.8, 1.0, 8)
    assert c.scored.before == pytest.approx(np.nanmean(fresh_before, axis=1).mean())
    assert c.scored.after == pytest.approx(fresh_after.mean())
    assert c.scored.delta > 0.2 and c.scored.ci95[0] > 0 and c.scored.p_value < 0.01
    assert c.before_ci95[0] < c.scored.before < c.before_ci95[1]
    assert cmp.pass_at_k_from == "confirm"
    rows = {r.k: r for r in cmp.pass_at_k}
    assert rows[1].before == pytest.approx(c.scored.before) and rows[1].after == pytest.approx(c.scored.after)
    assert (rows[8].n_tasks, rows[4].n_tasks) == (39, 40)
    assert FairComparison.model_validate_json(cmp.model_dump_json()) == cmp
    # two samples per temperature are enough to choose; pass@8 needs the 8 fresh ones
    with pytest.raises(ValueError, match="pass@8 needs at least 8 samples"):
        compare_sweeps(
            before, after, TEMPS, [1, 8], confirm=ConfirmGrids(0.8, 1.0, fresh_before[:, :4], fresh_after[:, :4])
        )
    with pytest.raises(ValueError, match="confirm grids"):
        compare_sweeps(before, after, TEMPS, [1], confirm=ConfirmGrids(0.8, 1.0, fresh_before[:5], fresh_after[:5]))


def test_compare_sweeps_refuses_mismatched_grids_and_a_k_above_the_samples() -> None:
    g = _grid([0.5] * 4, 5, 4, 0)
    with pytest.raises(ValueError, match="one shape"):
        compare_sweeps(g, g[:, :3], TEMPS, [1])
    with pytest.raises(ValueError, match="pass@8 needs at least 8 samples"):
        compare_sweeps(g, g, TEMPS, [1, 8])


def test_run_evals_runs_several_evals_in_one_pool_like_separate_ones(tmp_path: Path) -> None:
    tasks = {f"t{i}": Task(instance_id=f"t{i}", repo="r", problem_statement="-", patch="") for i in range(5)}
    cfg = load_config(None)

    def spec(t: float) -> EvalSpec:
        return EvalSpec(
            policies=[PolicySpec(name="base", model="m"), PolicySpec(name="rl", model="n", base="base")],
            harnesses=["h"],
            task_ids=list(tasks),
            samples=3,
            temperature=t,
        )

    jobs = [
        EvalJob(spec(t), det.factory(spec(t), tasks, tmp_path / f"T{t}", cfg), tmp_path / f"T{t}") for t in (0.6, 1.0)
    ]
    together = run_evals(jobs, concurrency=4)
    for t, res in zip((0.6, 1.0), together, strict=True):
        alone = run_eval(spec(t), det.factory(spec(t), tasks, tmp_path, cfg), tmp_path / f"alone{t}", concurrency=2)
        assert [s.model_dump() for s in res.samples] == [s.model_dump() for s in alone.samples]
        assert (tmp_path / f"T{t}" / "results.json").is_file()


def test_the_bench_stages_print_progress_lines_without_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """A stage of `lego bench learn` is many minutes of samples: a line per tenth of them (and the last)
    reaches a log file, with what passed and what was infrastructure."""
    from lego.conductor.evaluate import SampleProgress
    from lego.eval.results import SampleKey, SampleResult

    progress = SampleProgress(25)
    for k in range(25):
        key = SampleKey(policy="start", harness="lego-agent", task_id=f"t{k}", sample=0, seed=k)
        progress(SampleResult(key=key, passed=k % 2 == 0, infra=k == 3))
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 13  # every 2 of 25 (a tenth, rounded down), and the 25th
    assert lines[0].startswith("2/25 samples: 1 passed, 0 infra, ")
    assert lines[-1].startswith("25/25 samples: 13 passed, 1 infra, ") and lines[-1].endswith("~0.0 min left")
