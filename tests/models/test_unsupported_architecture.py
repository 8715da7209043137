"""A model the in-process engine cannot run is refused when it loads, naming its architecture and the
way out, instead of loading and then failing every request with a tensor-shape error (issue 28.6).
The case from the issue: a DeepSeek-V3-shaped model (multi-head latent attention, query/key heads
of another size than value heads), random tiny weights on a real tokenizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lego.errors import ModelError


@pytest.fixture(scope="module")
def mla_model(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lego.models.tiny import build_tiny_on

    return build_tiny_on(tiny_model_dir, tmp_path_factory.mktemp("ds") / "m", "deepseek_v3")


def _lego(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", *args], capture_output=True, text=True, timeout=300
    )


def test_the_engine_refuses_it_at_start_up(mla_model: Path) -> None:
    from lego.engines.transformers_engine import TransformersEngine

    with pytest.raises(ModelError) as err:
        TransformersEngine(mla_model, device="cpu")
    message = str(err.value)
    assert "DeepseekV3ForCausalLM" in message and "latent attention" in message and "vllm" in message


@pytest.mark.parametrize("command", [["generate", "--max-tokens", "2", "hi"], ["proxy", "--port", "0"]])
def test_the_cli_says_so_in_one_line_and_exits_2(mla_model: Path, command: list[str]) -> None:
    res = _lego(command[0], "--model", str(mla_model), *command[1:])
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "DeepseekV3ForCausalLM" in lines[0] and "Error:" not in lines[0], res.stderr


def test_models_check_reports_it(mla_model: Path) -> None:
    res = _lego("models", "check", str(mla_model))
    assert "DeepseekV3ForCausalLM" in res.stdout and "ok: lego can serve" not in res.stdout
