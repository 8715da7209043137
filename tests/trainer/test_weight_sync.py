"""Weight delivery, one test per path: in-process copy into a real TransformersEngine, and vLLM's
full reload and LoRA hot-load through lego's own VLLMEngine against the stand-in `vllm serve`
(real HTTP, vLLM's routes, a real engine behind them). After each push the served weights are the
trained ones: the server's teacher-forced logprobs equal the trainer's recompute."""

import shutil

import pytest

from lego.config import EngineConfig, LegoConfig
from lego.engines.transformers_engine import TransformersEngine
from lego.engines.vllm import VLLMEngine
from lego.errors import ConfigError, EngineUnavailableError
from lego.training.trainer import Trainer
from lego.training.weight_sync import build_weight_sync
from tests.engines.vllm_standin import VLLMStandIn


def _served_logprobs(engine: TransformersEngine, item) -> list[float]:
    s = item.segment
    return engine.score_sync([s.input_ids], [len(s.prompt_ids)], 1.0)[0]


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_in_process_copy_makes_engine_serve_the_trained_policy(model_dir, items, make_config, finetune):
    kw = {"finetune": "lora", "lora_rank": 4, "lora_alpha": 8.0, "lr": 1e-2} if finetune == "lora" else {}
    trainer = Trainer(model_dir, make_config(**kw))
    engine = TransformersEngine(model_dir, dtype="float32", num_threads=1)
    sync = build_weight_sync(EngineConfig(kind="transformers"), engine)
    trainer.step(items)
    trainer.step(items)
    assert sync.push(trainer) == engine.policy_version == 1
    assert _served_logprobs(engine, items[0]) == pytest.approx(trainer.recompute([items[0]])[0], abs=1e-5)


def test_vllm_full_reload_serves_the_trained_weights(model_dir, items, make_config, tmp_path):
    served = tmp_path / "served"
    shutil.copytree(model_dir, served)
    trainer = Trainer(model_dir, make_config())
    with VLLMStandIn(served) as server:
        engine = VLLMEngine(server.url)
        sync = build_weight_sync(EngineConfig(kind="vllm", vllm_url=server.url, vllm_weights_dir=str(served)), engine)
        before = _served_logprobs(server.engine, items[0])
        trainer.step(items)
        assert sync.push(trainer) == engine.policy_version == 1
        sync.close()
    assert server.loads == [("/collective_rpc", str(served), 1)]
    assert engine.model == "lego-policy"  # full reload keeps the served name
    after = _served_logprobs(server.engine, items[0])
    assert after != pytest.approx(before, abs=1e-6)
    assert after == pytest.approx(trainer.recompute([items[0]])[0], abs=1e-5)
    assert not [p for p in served.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_vllm_lora_hot_load_serves_each_new_adapter(model_dir, items, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config(finetune="lora", lora_rank=4, lora_alpha=8.0, lr=1e-2))
    cfg = EngineConfig(kind="vllm", vllm_weight_sync="lora", vllm_weights_dir=str(tmp_path))
    with VLLMStandIn(model_dir) as server:
        engine = VLLMEngine(server.url)
        sync = build_weight_sync(cfg.model_copy(update={"vllm_url": server.url}), engine)
        trainer.step(items)
        assert sync.push(trainer) == 1
        trainer.step(items)
        assert sync.push(trainer) == 2
        sync.close()
    assert [(route, name) for route, name, _ in server.loads] == [
        ("/v1/load_lora_adapter", "lego-policy-v1"),
        ("/v1/load_lora_adapter", "lego-policy-v2"),
    ]
    assert server.adapters == {"lego-policy-v2"}  # the previous adapter was unloaded
    assert engine.model == "lego-policy-v2" and engine.policy_version == 2
    assert not (tmp_path / "adapters" / "lego-policy-v1").exists()
    assert _served_logprobs(server.engine, items[0]) == pytest.approx(trainer.recompute([items[0]])[0], abs=1e-5)


def test_weight_sync_refusals_name_the_fix(model_dir, make_config, tmp_path):
    engine = VLLMEngine("http://127.0.0.1:9", model="lego-policy", max_model_len=256, max_retries=0)
    with pytest.raises(ConfigError, match=r"engine\.vllm_weights_dir"):
        build_weight_sync(EngineConfig(kind="vllm", vllm_url="http://127.0.0.1:9"), engine)
    with pytest.raises(ConfigError, match="never trains"):
        build_weight_sync(EngineConfig(kind="oracle"), engine)
    # mixed configs: each sync needs its capability of the engine, and says so when it is missing
    with pytest.raises(ConfigError, match="takes no in-process weights"):
        build_weight_sync(EngineConfig(kind="transformers"), engine)
    in_process = TransformersEngine(model_dir, dtype="float32", num_threads=1)
    with pytest.raises(ConfigError, match=r"engine\.kind='vllm' but the engine is a TransformersEngine"):
        build_weight_sync(EngineConfig(kind="vllm", vllm_url="http://x", vllm_weights_dir=str(tmp_path)), in_process)
    with pytest.raises(ValueError, match=r"lora_modules_to_save.*vllm_weight_sync='full'"):
        LegoConfig.model_validate(
            {
                "engine": {"kind": "vllm", "vllm_url": "http://x", "vllm_weight_sync": "lora"},
                "training": {"finetune": "lora", "lora_modules_to_save": ["norm"]},
            }
        )
    cfg = EngineConfig(kind="vllm", vllm_url="http://127.0.0.1:9", vllm_weights_dir=str(tmp_path), request_timeout_s=2)
    normed = Trainer(model_dir, make_config(finetune="lora", lora_rank=4, lora_modules_to_save=["norm"]))
    lora = build_weight_sync(cfg.model_copy(update={"vllm_weight_sync": "lora"}), engine)
    with pytest.raises(ConfigError, match=r"lora_modules_to_save.*vllm_weight_sync='full'"):
        lora.push(normed)
    dead = build_weight_sync(cfg, engine)
    with pytest.raises(EngineUnavailableError, match="cannot reach vLLM"):
        dead.push(Trainer(model_dir, make_config()))
