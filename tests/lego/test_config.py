"""Config loading: files in three formats, dotted overrides, and errors that name the field and fix."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from lego.conductor.cli.main import cli
from lego.config import (
    LegoAgentOptions,
    LegoConfig,
    SFTConfig,
    apply_overrides,
    config_doc,
    load_config,
    to_toml,
    validate_config,
)
from lego.errors import ConfigError


def test_default_config_loads_and_is_the_embedded_default() -> None:
    cfg = load_config()
    assert cfg.engine.kind == "transformers" and cfg.engine.model == "default"
    assert cfg.harness.name == "lego-agent" and cfg.sandbox.kind == "local"
    assert cfg.tasks.source == "boundary" and cfg.tasks.split == "train" and cfg.tasks.eval_split == "heldout"


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
    cfg = load_config(None, ["harness.weights={lego-agent = 1.0}", "training.fidelity.patience=5"])
    again = validate_config(tomllib.loads(to_toml(cfg)))
    assert again == cfg
    assert isinstance(again, LegoConfig)


def test_every_config_field_has_a_description() -> None:
    fields = config_doc()
    assert len(fields) > 80  # every section, sft and each harness's typed options included
    assert [f.key for f in fields if not f.description.strip()] == []
    keys = {f.key for f in fields}
    assert {"algorithm.aggregation", "training.lr", "sft.steps", "harness.options.lego-agent.max_tokens"} <= keys


def test_config_show_doc_prints_type_default_and_description() -> None:
    out = CliRunner().invoke(cli, ["config", "show", "--doc"])
    assert out.exit_code == 0, out.output
    assert "training.lr: float = 1e-05\n    AdamW learning rate" in out.output
    assert "harness.options.opencode.max_output_tokens: int = 4096" in out.output


def test_harness_options_are_typed_at_load_and_an_unknown_one_names_the_valid_ones() -> None:
    cfg = load_config(None, ["harness.options={lego-agent = {max_tokens = 24}}"])
    assert cfg.harness.options["lego-agent"] == LegoAgentOptions(max_tokens=24)
    assert cfg.harness.options_for("lego-agent") == {"python": "python3", "temperature": 1.0, "max_tokens": 24}
    assert cfg.harness.options_for("opencode") == {"context_window": 32768, "max_output_tokens": 4096}
    with pytest.raises(
        ConfigError, match=r"'lego-agent' has no option\(s\) temprature; valid options: python, temperature"
    ):
        load_config(None, ["harness.options={lego-agent = {temprature = 0.5}}"])
    with pytest.raises(ConfigError, match="max_tokens"):
        load_config(None, ["harness.options={lego-agent = {max_tokens = 0}}"])
    with pytest.raises(ConfigError, match="no harness named 'lego-agnet'; valid names: aider"):
        load_config(None, ["harness.options={lego-agnet = {max_tokens = 24}}"])
    # a user's own module:Class adapter takes its options as given: its constructor checks them
    assert load_config(None, ["harness.options={'my.mod:Agent' = {x = 1}}"]).harness.options_for("my.mod:Agent") == {
        "x": 1
    }
    again = validate_config(tomllib.loads(to_toml(cfg)))
    assert again == cfg


def test_sft_config_is_a_section_that_forbids_unknown_keys() -> None:
    cfg = load_config(None, ["sft.steps=7", "sft.source=builtin"])
    assert isinstance(cfg.sft, SFTConfig) and (cfg.sft.steps, cfg.sft.source) == (7, "builtin")
    with pytest.raises(ConfigError, match=r"did you mean 'sft\.steps'"):
        load_config(None, ["sft.stepz=7"])
    with pytest.raises(ValidationError, match="Extra inputs"):
        SFTConfig(stepz=7)  # type: ignore[call-arg]


@pytest.mark.parametrize("key", ["harness.name=lego-agnet", "harness.weights={aidr = 1.0}", 'eval.harnesses=["codx"]'])
def test_a_harness_name_is_checked_at_load_with_the_nearest_name(key: str) -> None:
    with pytest.raises(ConfigError, match="did you mean"):
        load_config(None, [key])
    assert load_config(None, ["harness.name=my.module:MyHarness"]).harness.name == "my.module:MyHarness"
