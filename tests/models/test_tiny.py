"""The embedded default: deterministic builds, a normal HF directory, and resolve_model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from lego.errors import ModelError
from lego.models.tiny import build_tiny, resolve_model
from lego.models.tokenizer import CONTROL_TOKENS, SPECIAL_TOKENS


def test_directory_is_a_normal_hf_checkpoint(tiny_model_dir: Path) -> None:
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ):
        assert (tiny_model_dir / name).is_file(), name
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA
    tok_cfg = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tok_cfg["chat_template"] == (tiny_model_dir / "chat_template.jinja").read_text()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert 2_000_000 < sum(p.numel() for p in model.parameters()) < 8_000_000
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert config["vocab_size"] == len(tok)


def test_tokenizer_special_and_control_tokens(tiny_model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    for token in SPECIAL_TOKENS + CONTROL_TOKENS:
        ids = tok.encode(f"a{token}b", add_special_tokens=False)
        assert tok.convert_tokens_to_ids(token) in ids, token
    # byte-level: any text round-trips, nothing is unknown
    text = "def f(x):\n    return x  # ünïcödé ✓ 日本 \t\r\n"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    # ChatML control tokens are special; <think>/<tool_call> are plain text tokens, as in Qwen3
    assert tok.decode(tok.encode("<|im_end|><think>", add_special_tokens=False), skip_special_tokens=True) == "<think>"


def test_build_is_deterministic(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = build_tiny(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    other = build_tiny(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (tiny_model_dir / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()


def test_resolve_model_default_builds_once_even_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEGO_CACHE_DIR", str(tmp_path / "cache"))
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(resolve_model("default"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    path = results[0]
    assert path.parent == tmp_path / "cache" / "models"
    assert [p.name for p in path.parent.iterdir() if not p.name.startswith(".")] == [path.name]
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("default") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime


def test_resolve_model_paths(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert resolve_model(str(tiny_model_dir)) == tiny_model_dir.resolve()
    with pytest.raises(ModelError, match="not a directory"):
        resolve_model(tmp_path / "missing")
    with pytest.raises(ModelError, match=r"no config\.json"):
        resolve_model(tmp_path)
