"""The whole configuration (:class:`LegoConfig`, which checks settings across sections) and how it is
read: a TOML/YAML/JSON file, then dotted ``-o key.sub=value`` overrides, checked key by key; and
written back as TOML (:func:`to_toml`: `lego config show`, a run's ``config.toml``)."""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import tomli_w
import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from lego.config.base import Section
from lego.config.environment import HARNESS_OPTIONS, GuardsConfig, HarnessConfig, SandboxConfig, TasksConfig
from lego.config.learning import ServeConfig
from lego.config.serving import EngineConfig, ProxyConfig
from lego.config.training import AlgorithmConfig, EvalConfig, SFTConfig, TrainingConfig
from lego.errors import ConfigError

__all__ = [
    "FieldDoc",
    "LegoConfig",
    "apply_overrides",
    "config_doc",
    "default_config_path",
    "load_config",
    "validate_config",
]


class LegoConfig(Section):
    """The whole configuration of a run."""

    engine: EngineConfig = Field(default_factory=EngineConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    guards: GuardsConfig = Field(default_factory=GuardsConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @model_validator(mode="after")
    def _combinations(self) -> LegoConfig:
        a = self.algorithm
        if a.ratio_level == "token" and max(a.clip_low, a.clip_high) < 0.01:
            raise ValueError(
                "algorithm.ratio_level='token' with GSPO's sequence clip range "
                f"(clip_low={a.clip_low}, clip_high={a.clip_high}) clips nearly every token; "
                "set algorithm.clip_low=0.2 and algorithm.clip_high=0.28, or use algorithm.ratio_level='sequence'"
            )
        if a.ratio_level == "sequence" and min(a.clip_low, a.clip_high) > 0.05:
            raise ValueError(
                "algorithm.ratio_level='sequence' with a token-level clip range "
                f"(clip_low={a.clip_low}, clip_high={a.clip_high}) never clips the length-normalised ratio; "
                "set algorithm.clip_low=3e-4 and algorithm.clip_high=4e-4 (GSPO), or use algorithm.ratio_level='token'"
            )
        if a.kl_coef > 0 and self.training.finetune == "full" and self.engine.kind == "vllm":
            raise ValueError(
                "algorithm.kl_coef>0 needs a reference model; with training.finetune='full' on a vLLM engine the "
                "trainer would hold two full copies; use training.finetune='lora' (the base is the reference) or set "
                "algorithm.kl_coef=0"
            )
        if self.engine.kind == "vllm" and not self.engine.vllm_url:
            raise ValueError("engine.kind='vllm' needs engine.vllm_url, e.g. -o engine.vllm_url=http://127.0.0.1:8000")
        if self.engine.kind == "vllm" and self.engine.vllm_weight_sync == "lora":
            if self.training.finetune != "lora":
                raise ValueError(
                    "engine.vllm_weight_sync='lora' hot-loads an adapter; set training.finetune='lora' "
                    "or engine.vllm_weight_sync='full'"
                )
            if self.training.lora_modules_to_save:
                raise ValueError(
                    "vLLM serves LoRA adapters on linear layers only, so training.lora_modules_to_save "
                    f"({self.training.lora_modules_to_save}) cannot travel as an adapter; set "
                    "engine.vllm_weight_sync='full' (pushes the merged weights) or training.lora_modules_to_save=[]"
                )
        if self.harness.weights:
            bad = [k for k, w in self.harness.weights.items() if w < 0]
            if bad or sum(self.harness.weights.values()) <= 0:
                raise ValueError("harness.weights must be non-negative with a positive sum, e.g. {lego-agent=1.0}")
        return self


def default_config_path() -> Path:
    """The shipped config of the embedded default (tiny policy, built-in tasks, lego-agent, local sandbox)."""
    return Path(__file__).parent.parent / "configs" / "default.toml"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist; pass an existing .toml or .yaml file")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a table/mapping at the top level, not {type(data).__name__}")
    return data


def to_toml(model: BaseModel) -> str:
    """``model`` (a :class:`LegoConfig` or any of its sections) as TOML that :func:`load_config` reads back
    to the same model: sub-models and mappings as ``[tables]``, every field shown.

    TOML has no null, so a field that is unset (None) is a comment in its table, with its type and what
    it is for: ``# vllm_url = <str>  # unset; Base URL of `vllm serve` (engine.kind='vllm').`` A
    comment reads back as nothing, which is None again, and setting the field is writing the line."""
    text = tomli_w.dumps(model.model_dump(mode="json", exclude_none=True))
    unset = _unset_fields(model, ())
    if not unset:
        return text
    # tomli_w starts every table with its header at column 0 and nothing else there does (array
    # items are indented, strings are one line): split at the headers, append each table's comments.
    blocks = re.split(r"(?m)^(?=\[)", text)
    tables: dict[str, int] = {block.split("\n", 1)[0]: i for i, block in enumerate(blocks) if block.startswith("[")}
    for path, lines in unset.items():
        if not path:
            blocks[0] = "".join(f"{line}\n" for line in lines) + blocks[0]
            continue
        header = tomli_w.dumps(_nest(list(path), {})).strip()  # the header as tomli_w spells it, quotes and all
        if header not in tables:  # a table of sub-tables only (no header of its own yet): TOML allows it after them
            tables[header] = len(blocks)
            blocks.append(f"{header}\n")
        i = tables[header]
        blocks[i] = blocks[i].rstrip("\n") + "\n" + "".join(f"{line}\n" for line in lines) + "\n"
    return "".join(blocks).rstrip("\n") + "\n"


def _unset_fields(model: BaseModel, path: tuple[str, ...]) -> dict[tuple[str, ...], list[str]]:
    """The comment line of every None field of ``model`` and the models below it, by table path."""
    out: dict[tuple[str, ...], list[str]] = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None:
            kind = " | ".join(_type_name(a) for a in get_args(field.annotation) if a is not type(None))
            about = _first_sentence(field.description or "")
            out.setdefault(path, []).append(
                f"# {name} = <{kind or 'value'}>  # unset" + (f"; {about}" if about else "")
            )
        elif isinstance(value, BaseModel):
            out.update(_unset_fields(value, (*path, name)))
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    out.update(_unset_fields(item, (*path, name, str(key))))
    return out


def _first_sentence(text: str) -> str:
    """Up to the first full stop that a capital letter follows ("e.g. -o" goes on), or all of it."""
    return re.split(r"(?<=\.)\s+(?=[A-Z])", " ".join(text.split()), maxsplit=1)[0]


def _parse_value(raw: str) -> Any:
    """An override value: TOML/JSON literal if it parses (numbers, booleans, lists, inline tables), else a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _model_for_path(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = LegoConfig
    for key in path:
        field = model.model_fields.get(key)
        if field is None:
            return None
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            return None
    return model


def _check_keys(data: dict[str, Any], model: type[BaseModel], prefix: list[str]) -> None:
    """Reject unknown keys, naming the nearest valid one."""
    for key, value in data.items():
        fields = model.model_fields
        if key not in fields:
            dotted = ".".join([*prefix, key])
            near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.5)
            hint = f"did you mean '{'.'.join([*prefix, near[0]])}'?" if near else f"valid keys: {', '.join(fields)}"
            raise ConfigError(f"unknown config key '{dotted}'; {hint}")
        sub = _model_for_path([*prefix, key])
        if sub is not None and isinstance(value, dict):
            _check_keys(value, sub, [*prefix, key])


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides to a raw config mapping (returns a new mapping)."""
    out = json.loads(json.dumps(data))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} has no '='; write it as key.sub=value, e.g. training.steps=3")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"override {item!r} names no key; write it as key.sub=value")
        _check_keys(_nest(parts, None), LegoConfig, [])
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: '{p}' is a value, not a section")
            node = nxt
        node[parts[-1]] = _parse_value(raw.strip())
    return out


def _nest(parts: list[str], value: Any) -> dict[str, Any]:
    node: Any = value
    for p in reversed(parts):
        node = {p: node}
    return node  # type: ignore[no-any-return]


def validate_config(data: dict[str, Any]) -> LegoConfig:
    """Validate a raw mapping into a :class:`LegoConfig`, translating pydantic errors to :class:`ConfigError`."""
    _check_keys(data, LegoConfig, [])
    try:
        return LegoConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "config"
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{loc}: {msg}" if loc != "config" else msg)
        raise ConfigError("invalid config: " + "; ".join(lines)) from exc


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> LegoConfig:
    """Load a config file (TOML/YAML/JSON; None: the shipped default) and apply dotted overrides."""
    data = _read_file(Path(path)) if path is not None else _read_file(default_config_path())
    return validate_config(apply_overrides(data, overrides or []))


@dataclass(frozen=True)
class FieldDoc:
    """One config field as `lego config show --doc` prints it."""

    key: str
    type: str
    default: str
    description: str


def config_doc(model: type[BaseModel] = LegoConfig, prefix: str = "") -> list[FieldDoc]:
    """Every leaf field of ``model`` (sections recursed, each harness's typed options under
    ``harness.options.<name>``) with its dotted key, type, default and description."""
    out: list[FieldDoc] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(config_doc(ann, key + "."))
            continue
        default = field.get_default(call_default_factory=True)
        out.append(FieldDoc(key, _type_name(ann), json.dumps(default, default=str), field.description or ""))
        if model is HarnessConfig and name == "options":
            for harness, options in HARNESS_OPTIONS.items():
                out.extend(config_doc(options, f"{key}.{harness}."))
    return out


def _type_name(ann: Any) -> str:
    return ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
