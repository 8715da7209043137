"""`lego models check` on tiny models built on real tokenizers: a servable model passes, a
template without tools is reported with its fix (exit 1), and a supplied template clears it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from lego.conductor.cli.models import models_group
from lego.models.families import Family, family
from lego.models.tiny import build_tiny_on
from tests.families.conftest import require


def test_a_tool_capable_model_passes(tmp_path: Path) -> None:
    f = require(family("qwen3"))
    out = build_tiny_on(f.tokenizer_dir(), tmp_path / "m", f.model_type)
    result = CliRunner().invoke(models_group, ["check", str(out)])
    assert result.exit_code == 0, result.output
    assert "hermes (supported)" in result.output and "<|im_end|> (151645)" in result.output
    assert "tied embeddings yes" in result.output and "ok: lego can serve" in result.output


def test_a_template_without_tools_is_a_problem_with_its_fix(tmp_path: Path) -> None:
    f = require(Family("llama3_1", "llama3_1", "llama", "llama3_json", "none"))
    out = build_tiny_on(f.tokenizer_dir(), tmp_path / "m", f.model_type)
    result = CliRunner().invoke(models_group, ["check", str(out)])
    assert result.exit_code == 1
    assert "NOT expressible" in result.output and "--chat-template FILE" in result.output
    template = tmp_path / "tools.jinja"
    template.write_text(require(family("llama3.1")).template() or "", encoding="utf-8")
    result = CliRunner().invoke(models_group, ["check", str(out), "--chat-template", str(template)])
    assert result.exit_code == 0, result.output
    assert "llama3_json (supported)" in result.output and "<|eot_id|>" in result.output


def test_build_tiny_on_a_real_tokenizer_with_a_supplied_template(tmp_path: Path) -> None:
    f = require(family("gpt-oss"))
    template = tmp_path / "harmony.jinja"
    template.write_text(f.template() or "", encoding="utf-8")
    args = ["build-tiny-on", str(f.tokenizer_dir()), str(tmp_path / "m"), "--model-type", f.model_type]
    result = CliRunner().invoke(models_group, [*args, "--chat-template", str(template)])
    assert result.exit_code == 0, result.output
    assert "GptOssForCausalLM" in result.output and "harmony (supported)" in result.output
    assert "<|call|> (200012), <|return|> (200002)" in result.output
