"""The CLI face: --help, version, config show, doctor, and exit code 2 for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from lego.conductor.cli.main import cli


def _lego(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", *args], capture_output=True, text=True, check=False
    )


def test_help_lists_every_command() -> None:
    out = CliRunner().invoke(cli, ["--help"])
    assert out.exit_code == 0
    for name in ("doctor", "config", "proxy", "train", "eval", "bench", "tasks", "harness", "models"):
        assert name in out.output


def test_version_and_config_show() -> None:
    assert "lego 0.1.0" in _lego("version").stdout
    res = _lego("config", "show", "-o", "training.steps=4")
    assert res.returncode == 0 and "steps = 4" in res.stdout


def test_bad_override_exits_2_naming_the_key() -> None:
    res = _lego("config", "show", "-o", "trainig.steps=4")
    assert res.returncode == 2
    assert "unknown config key 'trainig'" in res.stderr and "did you mean 'training'" in res.stderr


def test_doctor_prints_a_table_with_fixes() -> None:
    res = _lego("doctor")
    assert "bubblewrap" in res.stdout and "torch" in res.stdout and "docker engine" in res.stdout


def test_eval_refuses_a_missing_policy_dir_before_it_starts(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    res = subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "eval", "--policy", f"rl={missing}", "--harness",
         "lego-agent", "--tasks", "builtin:heldout", "--samples", "1", "--out", str(tmp_path / "ev")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert f"--policy rl={missing}: '{missing}' is not a directory" in res.stderr
    assert not (tmp_path / "ev").exists()  # refused before any sample ran
