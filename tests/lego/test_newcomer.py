"""Small things a newcomer met (issue 28.10), each through what they run or read:

- Ctrl-C on `lego train` prints the resume command as it was invoked (`.venv/bin/lego` after the
  README's set-up leaves lego off PATH), not a bare `lego`;
- `lego doctor` says where data and cache live, and the README names LEGO_DATA_DIR / LEGO_CACHE_DIR;
- the run report draws Pearson on a fixed scale with the fidelity gate's floor (noise at 1 - 1e-10
  is no swing), a termination label logged on one step is a line over the run, not one dot;
- the eval heatmap's colour bar is in % like its cells.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
LEGO = Path(sys.executable).parent / "lego"


@pytest.mark.skipif(not LEGO.exists(), reason="the lego console script is not installed beside this Python")
def test_ctrl_c_prints_the_resume_command_as_invoked(tmp_path: Path) -> None:
    typed = os.path.relpath(LEGO, ROOT)  # e.g. .venv/bin/lego, as the README's set-up leaves it
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": "/usr/bin:/bin"}  # lego not on PATH
    proc = subprocess.Popen(
        [typed, "train", "-o", f"training.out_dir={out}", "-o", "training.steps=2", "--unsafe-no-isolation"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 600
        for line in proc.stdout:  # interrupt once the run is ready and rolling out
            lines.append(line)
            if line.startswith("ready in") or time.monotonic() > deadline:
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + rest
    assert proc.returncode == 130, text[-3000:]
    expected = f"`{typed} train" + (" --resume`" if "saved step" in text else "`")
    assert expected in text and "`lego train" not in text, text[-2000:]


def test_doctor_says_where_data_and_cache_live(tmp_path: Path) -> None:
    env = {**os.environ, "LEGO_DATA_DIR": str(tmp_path / "d"), "LEGO_CACHE_DIR": str(tmp_path / "c")}
    out = subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "doctor"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "300"},
        timeout=120,
    ).stdout
    assert str(tmp_path / "d") in out and str(tmp_path / "c") in out
    assert "LEGO_DATA_DIR" in out and "LEGO_CACHE_DIR" in out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "LEGO_DATA_DIR" in readme and "LEGO_CACHE_DIR" in readme


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("[training.fidelity]\nmin_pearson = 0.95\n")
    lines = []
    for step in range(1, 6):
        m = {"training/rollout_actor_probs_pearson_corr": 1.0 - 1e-10 * (step % 2), "reward/mean": 0.1 * step}
        if step == 3:
            m["termination/timeout"] = 1.0
        lines.append(json.dumps({"step": step, "metrics": m, "wall_s": 1.0}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_the_report_draws_pearson_on_a_fixed_scale_with_the_gate_floor(tmp_path: Path) -> None:
    from lego.eval.train_report import fill_counts, gate_floor, load_metrics, panel_figure

    run = _run_dir(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "report", str(run)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    series = fill_counts(load_metrics(run))
    assert gate_floor(run) == 0.95
    name = "training/rollout_actor_probs_pearson_corr"
    fig = panel_figure({name: series[name]}, "Fidelity", floor=gate_floor(run))
    fig.canvas.draw()
    (ax,) = [a for a in fig.axes if a.get_title() == name]
    low, high = ax.get_ylim()
    assert low < 0.95 < 1.0 <= high < 1.01  # the scale reaches the floor: 1e-10 noise is a flat line
    assert ax.yaxis.get_offset_text().get_text() == ""  # no "+9.9999999e-1" offset axis
    assert any(np.allclose(line.get_ydata(), 0.95) for line in ax.get_lines())  # the floor, drawn
    assert series["termination/timeout"] == [(1, 0.0), (2, 0.0), (3, 1.0), (4, 0.0), (5, 0.0)]


def test_the_eval_heatmap_colour_bar_is_in_percent() -> None:
    from lego.eval.plots import heatmap

    values = np.array([[0.25, 0.5]])
    fig = heatmap(values, ["p"], ["a", "b"], [["25%", "50%"]], "pass@1", vmin=0.0, vmax=1.0, percent=True)
    fig.canvas.draw()
    bar = fig.axes[-1]
    ticks = [t.get_text() for t in bar.get_yticklabels() if t.get_text()]
    assert ticks and all(t.endswith("%") for t in ticks) and "100%" in ticks
