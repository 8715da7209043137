"""`lego report RUN_DIR` on a synthetic run directory holding real StepMetrics / Trajectory records."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.train import report
from lego.errors import ConfigError
from lego.eval.train_report import group_metrics, load_metrics, write_train_report
from lego.io import append_jsonl, atomic_write_text
from lego.types import GradeResult, Segment, StepMetrics, Trajectory

HARNESSES = ["lego-agent", "aider"]


def make_run(run: Path, steps: int = 4) -> None:
    for step in range(1, steps + 1):
        m = {
            "reward/mean": 0.2 + 0.1 * step,
            "train/pass_rate": 0.1 * step,
            "training/rollout_actor_probs_pearson_corr": 0.999 + 0.0001 * step,
            "training/rollout_probs_diff_max": 0.01 / step,
            "training/rollout_probs_diff_mean": 0.001 / step,
            "rollout_corr/kl": 1e-4 * step,
            "rollout_corr/k3_kl": 1e-4 * step,
            "actor/pg_clipfrac": 0.02 * step,
            "actor/entropy": 2.0 - 0.1 * step,
            "response_length/mean": 100.0 + step,
            "termination/completed": 6.0,
            "guards/test_tamper": float(step % 2),
            "timing/step_s": 3.0 + step,
        }
        for h in HARNESSES:
            m[f"training/rollout_actor_probs_pearson_corr/{h}"] = 0.998 + 0.0002 * step
            m[f"reward/mean@{h}"] = 0.1 * step + (0.1 if h == "aider" else 0.0)
        append_jsonl(run / "metrics.jsonl", StepMetrics(step=step, metrics=m, wall_s=3.0 + step).model_dump())
        for i in range(4):
            h = HARNESSES[i % 2]
            seg = Segment(prompt_ids=[1, 2, 3], response_ids=[4, 5, 6], response_mask=[1, 0, 1],
                          response_logprobs=[-0.1, None, -0.2], response_versions=[step, None, step])  # fmt: skip
            traj = Trajectory(
                trajectory_id=f"s{step}-{i}", session_id=f"s{step}-{i}", task_id=f"t{i}", harness=h, segments=[seg],
                termination="completed" if i < 3 else "max_turns", reward=float(i == 0),
                grade=GradeResult(reward=float(i == 0), resolved=i == 0), guard_flags={"test_tamper": i == 1},
            )  # fmt: skip
            atomic_write_text(
                run / "trajectories" / f"step_{step:04d}" / f"{traj.trajectory_id}.json", traj.model_dump_json()
            )
    # a validation line for the last step (merged), and a torn last line from a kill mid-write
    append_jsonl(run / "metrics.jsonl", {"step": steps, "metrics": {"val/pass_rate": 0.5, "note": "text"}, "wall_s": 0})
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "metr')


def test_report_plots_every_section_and_is_self_contained(tmp_path: Path) -> None:
    make_run(tmp_path)
    series = load_metrics(tmp_path)
    assert 99 not in {s for v in series.values() for s, _ in v}  # torn line dropped
    assert series["val/pass_rate"] == [(4, 0.5)] and "note" not in series
    sections, per_h = group_metrics(series, set(HARNESSES))
    assert "training/rollout_actor_probs_pearson_corr" in sections["Fidelity (rollout vs trainer probabilities)"]
    assert "rollout_corr/k3_kl" in sections["Fidelity (rollout vs trainer probabilities)"]
    assert "actor/pg_clipfrac" in sections["Policy update (actor/)"]
    assert "actor/entropy" in sections["KL and entropy"]
    assert "guards/test_tamper" in sections["Guard flags"]
    assert "timing/step_s" in sections["timing/"]
    assert set(per_h["reward/mean"]) == set(HARNESSES)
    assert set(per_h["training/rollout_actor_probs_pearson_corr"]) == set(HARNESSES)

    result = CliRunner().invoke(report, [str(tmp_path)])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "report.html").read_text()
    pngs = sorted(p.name for p in (tmp_path / "report_plots").glob("*.png"))
    assert {"terminations.png", "guard_flags.png", "harness_reward_mean.png"} <= set(pngs)
    assert any(p.startswith("fidelity") for p in pngs)
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == len(pngs) and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in html and "https://" not in html and "<link" not in html
    for title in ["Reward and pass rate", "KL and entropy", "Lengths and tokens", "Per harness: reward/mean",
                  "Termination labels", "Guard flags"]:  # fmt: skip
        assert title in html
    assert "4 logged steps (1–4)" in html and "16 saved trajectories" in html
    assert math.isclose(series["actor/pg_clipfrac"][-1][1], 0.08)


def test_report_custom_out_and_missing_metrics(tmp_path: Path) -> None:
    make_run(tmp_path / "run", steps=2)
    out = tmp_path / "elsewhere" / "r.html"
    assert write_train_report(tmp_path / "run", out) == out
    assert out.is_file() and (tmp_path / "elsewhere" / "r_plots").is_dir()
    with pytest.raises(ConfigError, match=r"metrics\.jsonl does not exist"):
        write_train_report(tmp_path)


def test_step_axis_has_whole_step_ticks() -> None:
    """A two-step run is drawn on steps 1 and 2, not on 1.0, 1.5, 2.0."""
    import matplotlib.pyplot as plt

    from lego.eval.train_report import _step_axis

    fig, ax = plt.subplots()
    ax.plot([1, 2], [0.1, 0.2])
    _step_axis(ax)
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 2]
    plt.close(fig)
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
