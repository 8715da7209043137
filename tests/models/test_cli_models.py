"""`lego models build-tiny` and `lego generate` through the real CLI entry point."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from lego.conductor.cli.main import cli


def test_build_tiny_then_generate(tmp_path: Path, tiny_model_dir: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "m"
    result = runner.invoke(cli, ["models", "build-tiny", str(out), "--seed", "0"])
    assert result.exit_code == 0, result.output
    assert f"built {out}" in result.output
    assert (out / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()

    result = runner.invoke(cli, ["generate", "--model", str(out), "--max-tokens", "8", "--raw", "hello"])
    assert result.exit_code == 0, result.output
    assert "prompt +" in result.output and "sampled tokens" in result.output
    # same seed, same completion
    again = runner.invoke(cli, ["generate", "--model", str(out), "--max-tokens", "8", "--raw", "hello"])
    assert again.stdout == result.stdout  # stderr carries the timing line


def test_generate_with_a_missing_model_says_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["generate", "--model", str(tmp_path / "nope"), "hi"])
    assert result.exit_code != 0
    assert "build-tiny" in str(result.exception)
