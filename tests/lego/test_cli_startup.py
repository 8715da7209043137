"""The first commands a newcomer types answer without importing torch or transformers (issue 28.9):
importing them is seconds of every command's start. Checked by what the real CLI process imports
(``python -X importtime``), not by a clock; `lego bench cli` measures the wall times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "matplotlib", "numpy")


def imported(*args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lego.conductor.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    return {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["version"],
        ["config", "show"],
        ["tasks", "list"],
        ["doctor"],
        ["bench", "--help"],
        ["train", "-o", "harness.name=nosuch"],
        ["run", "--task", "lego-builtin__nosuch-0001"],
    ],
    ids=" ".join,
)
def test_the_command_imports_no_heavy_library(args: list[str]) -> None:
    heavy = sorted(m for m in imported(*args) if m.split(".")[0] in HEAVY)
    assert not heavy, f"`lego {' '.join(args)}` imports {heavy[:8]}"


def test_version_still_names_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "version"], capture_output=True, text=True, check=True
    )
    assert "torch 2." in out.stdout


def test_bench_cli_writes_each_command_beside_the_baseline(tmp_path: Path) -> None:
    out = tmp_path / "cli.json"
    subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "bench", "cli", "-n", "1", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    report = json.loads(out.read_text())
    assert report["baseline"]["command"] == "python -c pass" and report["baseline"]["median_s"] > 0
    assert {"--help", "version", "config show", "tasks list", "doctor"} <= set(report["commands"])
    for row in report["commands"].values():
        assert row["ratio"] == pytest.approx(row["median_s"] / report["baseline"]["median_s"])
