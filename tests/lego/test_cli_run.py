"""`lego run` end to end (oracle engine, tiny model scoring, lego-agent in a real sandbox): it prints
the termination label with who caused it and why, and the reward."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from lego.conductor.cli.main import cli


def test_lego_run_prints_the_label_with_its_cause(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "traj.json"
    args = ["run", "--engine", "oracle", "--model", str(tiny_model_dir), "--task", "lego-builtin__roman-0001"]
    args += [
        "--max-turns",
        "10",
        "--timeout",
        "300",
        "--out",
        str(out),
        "-o",
        "harness.options={lego-agent={max_tokens=4096}}",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    lines = {ln.split(maxsplit=1)[0]: ln.split(maxsplit=1)[1] for ln in res.output.splitlines() if ln.strip()}
    assert lines["termination"] == "completed (policy: the harness finished; the diff was graded)", res.output
    assert lines["reward"] == "1.0", res.output
    saved = json.loads(out.read_text())
    assert saved["cause"] == "policy" and "gold_patch" not in json.dumps(saved["metadata"])


def test_lego_run_says_when_a_completion_was_cut(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The oracle's one-call patch (over 500 tokens) cut at 100: the screen says so and how to raise it."""
    args = ["run", "--engine", "oracle", "--model", str(tiny_model_dir), "--task", "lego-builtin__roman-0001"]
    args += ["--max-turns", "3", "--out", str(tmp_path / "t.json"), "-o", "harness.options.lego-agent.max_tokens=100"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "reward      0.0" in res.output
    assert "cut at max_tokens=100; raise it with -o harness.options.lego-agent.max_tokens=N" in res.output, res.output
