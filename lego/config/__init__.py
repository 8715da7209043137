"""Configuration: one pydantic model per component, composed into :class:`LegoConfig`.

Loaded from TOML or YAML (:func:`load_config`), then dotted ``key.sub=value`` overrides are applied
(:func:`apply_overrides`). Unknown keys and invalid combinations raise :class:`ConfigError` with the
field"s dotted name and the fix (for a misspelt key, the nearest valid name).

One place to import from (``from lego.config import X``); the sections live by what they configure:
:mod:`~lego.config.serving` (engine, proxy), :mod:`~lego.config.environment` (sandbox, guards, harness,
tasks), :mod:`~lego.config.training` (algorithm, training, eval, sft), :mod:`~lego.config.learning` (serve) and :mod:`~lego.config.loading`
(the whole :class:`LegoConfig`, files, overrides, the field reference).
"""

from lego.config.environment import (
    HARNESS_OPTIONS,
    ClaudeCodeOptions,
    CodexOptions,
    GuardsConfig,
    HarnessConfig,
    LegoAgentOptions,
    NoOptions,
    OpenCodeOptions,
    SandboxConfig,
    TasksConfig,
)
from lego.config.learning import ServeConfig
from lego.config.loading import (
    FieldDoc,
    LegoConfig,
    apply_overrides,
    config_doc,
    default_config_path,
    load_config,
    to_toml,
    validate_config,
)
from lego.config.serving import (
    EngineConfig,
    ProxyConfig,
)
from lego.config.training import (
    AlgorithmConfig,
    EvalConfig,
    FidelityConfig,
    SFTConfig,
    TrainingConfig,
)

__all__ = [
    "HARNESS_OPTIONS",
    "AlgorithmConfig",
    "ClaudeCodeOptions",
    "CodexOptions",
    "EngineConfig",
    "EvalConfig",
    "FidelityConfig",
    "FieldDoc",
    "GuardsConfig",
    "HarnessConfig",
    "LegoAgentOptions",
    "LegoConfig",
    "NoOptions",
    "OpenCodeOptions",
    "ProxyConfig",
    "SFTConfig",
    "SandboxConfig",
    "ServeConfig",
    "TasksConfig",
    "TrainingConfig",
    "apply_overrides",
    "config_doc",
    "default_config_path",
    "load_config",
    "to_toml",
    "validate_config",
]
