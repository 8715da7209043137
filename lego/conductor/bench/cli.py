"""`lego bench cli`: how long the commands a newcomer types first take to answer, each against
``python -c pass`` (the interpreter's own start) measured in the same run, as a ratio.

Measured commands: ``lego --help``, ``lego version``, ``lego config show``, ``lego tasks list``,
``lego doctor``, and a mistake (``lego train -o harness.name=nosuch``: one line, exit 2). Each is a
fresh process, run ``--iterations`` times (interleaved with the baseline, so load shifts hit both),
reported as the median and the fastest wall time; ``ratio`` is the command's median over the
baseline's. None of them imports torch (:mod:`lego.conductor.cli.main`); a command that starts
to is the regression this catches.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click

from lego.io import atomic_write_json

__all__ = ["COMMANDS", "command", "run_bench"]

COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "version": ["version"],
    "config show": ["config", "show"],
    "tasks list": ["tasks", "list"],
    "doctor": ["doctor"],
    "a mistake (exit 2)": ["train", "-o", "harness.name=nosuch"],
}


def _wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False, env={**os.environ, "NO_COLOR": "1"})
    return time.perf_counter() - t0


def _stats(times: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(times), "min_s": min(times)}


def run_bench(iterations: int) -> dict[str, object]:
    """Wall times of each command and of the baseline, interleaved, ``iterations`` times each."""
    lego = [sys.executable, "-m", "lego.conductor.cli.main"]
    baseline: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(iterations):
        for name, args in COMMANDS.items():
            baseline.append(_wall([sys.executable, "-c", "pass"]))
            times[name].append(_wall([*lego, *args]))
    base = _stats(baseline)
    return {
        "baseline": {"command": "python -c pass", **base},
        "commands": {
            name: {**_stats(t), "ratio": statistics.median(t) / base["median_s"]} for name, t in times.items()
        },
        "iterations": iterations,
        "load_average": list(os.getloadavg()),
        "python": sys.version.split()[0],
    }


@click.command("cli")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="JSON report path.")
@click.option("-n", "--iterations", "n", default=3, show_default=True, type=click.IntRange(1, 100))
def command(out: Path | None, n: int) -> None:
    """Wall time of `lego --help`, `version`, `config show`, `tasks list`, `doctor` and a mistake,
    each beside `python -c pass` measured in the same run (JSON: medians, minima, ratios)."""
    report = run_bench(n)
    text = json.dumps(report, indent=2)
    if out is not None:
        atomic_write_json(out, report)
    click.echo(text)
