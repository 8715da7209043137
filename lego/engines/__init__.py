"""Engines serve the policy: token ids in, sampled ids and their logprobs out (see ``base.Engine``).

``build_engine(cfg)`` picks the implementation named by ``cfg.kind`` and imports it only then, so
a machine without vLLM never imports it:

- ``transformers``: in-process, CPU or CUDA (``lego.engines.transformers_engine``)
- ``vllm``: a running ``vllm serve`` endpoint (``lego.engines.vllm``)
- ``oracle``: replays gold patches through the harness's tools (``lego.engines.oracle``)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lego.engines.base import Engine
from lego.errors import ConfigError

if TYPE_CHECKING:
    from lego.config import EngineConfig

__all__ = ["ENGINES", "Engine", "build_engine"]

ENGINES: dict[str, str] = {
    "transformers": "lego.engines.transformers_engine:TransformersEngine",
    "vllm": "lego.engines.vllm:VLLMEngine",
    "oracle": "lego.engines.oracle:OracleEngine",
}


def build_engine(cfg: EngineConfig) -> Engine:
    """Build the engine ``cfg.kind`` names, from its config (``Cls.from_config(cfg)``)."""
    target = ENGINES.get(cfg.kind)
    if target is None:
        raise ConfigError(f"engine.kind={cfg.kind!r} is unknown; choose one of {sorted(ENGINES)}")
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    engine: Engine = cls.from_config(cfg)
    return engine
