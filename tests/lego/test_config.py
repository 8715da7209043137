"""Config loading: files in three formats, dotted overrides, and errors that name the field and fix."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from lego.conductor.cli.basic import to_toml
from lego.config import LegoConfig, apply_overrides, load_config, validate_config
from lego.errors import ConfigError


def test_default_config_loads_and_is_the_embedded_default() -> None:
    cfg = load_config()
    assert cfg.engine.kind == "transformers" and cfg.engine.model == "default"
    assert cfg.harness.name == "lego-agent" and cfg.sandbox.kind == "local"
    assert cfg.tasks.source == "starter" and cfg.tasks.split == "train" and cfg.tasks.eval_split == "heldout"


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_three_file_formats_give_the_same_config(tmp_path: Path, suffix: str) -> None:
    data = {"training": {"steps": 3, "lr": 1e-4}, "algorithm": {"group_size": 8}}
    path = tmp_path / f"c{suffix}"
    if suffix == ".toml":
        path.write_text("[training]\nsteps = 3\nlr = 1e-4\n[algorithm]\ngroup_size = 8\n")
    elif suffix == ".yaml":
        path.write_text("training:\n  steps: 3\n  lr: 1.0e-4\nalgorithm:\n  group_size: 8\n")
    else:
        path.write_text(json.dumps(data))
    cfg = load_config(path)
    assert (cfg.training.steps, cfg.training.lr, cfg.algorithm.group_size) == (3, 1e-4, 8)


def test_overrides_parse_typed_values_and_nest() -> None:
    cfg = load_config(
        None,
        [
            "training.steps=7",
            "harness.weights={lego-agent = 1.0, aider = 2.0}",
            "eval.harnesses=['aider', 'codex']",
            "proxy.api_key=secret",
            "sandbox.unsafe_no_isolation=true",
        ],
    )
    assert cfg.training.steps == 7
    assert cfg.harness.weights == {"lego-agent": 1.0, "aider": 2.0}
    assert cfg.eval.harnesses == ["aider", "codex"]
    assert cfg.proxy.api_key == "secret" and cfg.sandbox.unsafe_no_isolation is True


def test_unknown_key_names_the_nearest_valid_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'training\.stpes'; did you mean 'training\.steps'"):
        load_config(None, ["training.stpes=3"])
    path = tmp_path / "c.toml"
    path.write_text("[algorithmm]\ngroup_size = 2\n")
    with pytest.raises(ConfigError, match="did you mean 'algorithm'"):
        load_config(path)


def test_invalid_combination_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.ratio_level='token'.*set algorithm\.clip_low=0\.2"):
        load_config(None, ["algorithm.ratio_level=token"])
    ok = load_config(None, ["algorithm.ratio_level=token", "algorithm.clip_low=0.2", "algorithm.clip_high=0.28"])
    assert ok.algorithm.ratio_level == "token"
    with pytest.raises(ConfigError, match=r"engine\.vllm_url"):
        load_config(None, ["engine.kind=vllm"])


def test_wrong_type_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"training\.steps"):
        load_config(None, ["training.steps=many"])


def test_malformed_override_and_missing_file() -> None:
    with pytest.raises(ConfigError, match="has no '='"):
        apply_overrides({}, ["training.steps"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/config.toml")


def test_config_show_toml_round_trips() -> None:
    cfg = load_config(None, ["harness.weights={a = 1.0}", "training.fidelity.patience=5"])
    again = validate_config(tomllib.loads(to_toml(cfg)))
    assert again == cfg
    assert isinstance(again, LegoConfig)
