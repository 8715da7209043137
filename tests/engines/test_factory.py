"""One factory builds every engine kind from its config; the oracle's logprobs come from the real
model ``engine.model`` names."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from lego.config import EngineConfig
from lego.engines import build_engine
from lego.engines.oracle import OracleEngine
from lego.engines.transformers_engine import TransformersEngine
from lego.engines.vllm import VLLMEngine
from lego.errors import ConfigError
from lego.types import RequestContext, SamplingParams
from tests.engines.vllm_standin import VLLMStandIn


def test_builds_transformers_and_oracle_from_config(tiny_model_dir: Path) -> None:
    cfg = EngineConfig(model=str(tiny_model_dir), device="cpu", num_threads=1, max_model_len=512)
    engine = build_engine(cfg)
    assert isinstance(engine, TransformersEngine) and engine.max_model_len == 512
    oracle = build_engine(cfg.model_copy(update={"kind": "oracle"}))
    assert isinstance(oracle, OracleEngine) and isinstance(oracle.scorer, TransformersEngine)
    context = RequestContext(messages=[{"role": "user", "content": "fix it"}], tools=[], answer="diff --git a/x b/x\n")
    gen = asyncio.run(oracle.generate([1, 2, 3], SamplingParams(max_tokens=256, temperature=1.0), context))
    assert gen.token_ids and len(gen.logprobs) == len(gen.token_ids)
    assert all(lp < 0 and math.isfinite(lp) for lp in gen.logprobs)  # scored by the tiny model, not made up
    asyncio.run(oracle.close())
    asyncio.run(engine.close())


def test_builds_vllm_from_config_and_names_the_missing_url(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"engine\.vllm_url"):
        build_engine(EngineConfig(kind="vllm"))
    with VLLMStandIn(tiny_model_dir, max_model_len=300) as server:
        engine = build_engine(EngineConfig(kind="vllm", vllm_url=server.url + "/v1"))
        assert isinstance(engine, VLLMEngine)
        assert (engine.model, engine.max_model_len) == ("lego-policy", 300)  # read from /v1/models
        gen = asyncio.run(engine.generate([1, 2, 3], SamplingParams(max_tokens=4, temperature=1.0, seed=3)))
        assert len(gen.token_ids) == len(gen.logprobs) >= 1
        asyncio.run(engine.close())
