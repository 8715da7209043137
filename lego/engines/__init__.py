"""Engines serve the policy: token ids in, sampled ids and their logprobs out (the ``lego.seams.Engine`` seam).

``build_engine(cfg)`` is the one place engines are built: it picks the implementation named by
``cfg.kind`` and imports it only then (a machine without vLLM never imports it), and builds it
with ``Cls.from_config(cfg)``:

- ``transformers``: in-process, CPU or CUDA (``lego.engines.transformers_engine``)
- ``vllm``: a running ``vllm serve`` endpoint (``lego.engines.vllm``)
- ``oracle``: replays gold patches through the harness's tools, its tokens scored by the real
  model ``cfg.model`` names (``lego.engines.oracle``)

How trained weights reach each kind is ``lego.training.weight_sync.build_weight_sync``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lego.registry import Registry
from lego.seams import Engine

if TYPE_CHECKING:
    from lego.config import EngineConfig

__all__ = ["ENGINES", "Engine", "build_engine"]

ENGINES = Registry(
    "engine",
    {
        "transformers": "lego.engines.transformers_engine:TransformersEngine",
        "vllm": "lego.engines.vllm:VLLMEngine",
        "oracle": "lego.engines.oracle:OracleEngine",
    },
)


def build_engine(cfg: EngineConfig) -> Engine:
    """Build the engine ``cfg.kind`` names, from its config."""
    engine: Engine = ENGINES.resolve(cfg.kind).from_config(cfg)
    return engine
