"""`lego bench sandbox` runs end to end and writes its JSON (figures unchecked: no timed asserts)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from lego.conductor.bench.sandbox import command


def test_bench_sandbox_writes_report(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(command, ["--out", str(out), "-n", "2"])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    for key in ("create_s", "first_exec_s", "grade_s"):
        assert report[key]["n"] == 2 and 0 < report[key]["p50"] <= report[key]["p95"]
    assert set(report["baseline"]) == {"copy_spawn_s", "tests_s"}
    assert set(report["ratios"]) == {"create_p50_vs_copy_spawn", "grade_p50_vs_tests"}
    assert set(report["targets"]) >= {"create_p50_le_300ms", "grade_p50_le_tests_plus_500ms"}
