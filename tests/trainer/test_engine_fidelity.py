"""Against the real in-process engine: the trainer's recompute reproduces the engine's sampled
logprobs (Pearson 1.0), and after the in-process weight copy the engine samples from the trained policy."""

import asyncio

import pytest

from lego.algos import PEARSON, fidelity_metrics
from lego.training.trainer import Trainer, TrainItem
from lego.training.weight_sync import InProcessCopy
from lego.types import SamplingParams, Segment

engines = pytest.importorskip("lego.engines.transformers_engine")


def _rollouts(engine, prompts, temperature, max_tokens=8):
    async def run():
        return await asyncio.gather(
            *(
                engine.generate(p, SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=i))
                for i, p in enumerate(prompts)
            )
        )

    gens = asyncio.run(run())
    items = []
    for i, (p, g) in enumerate(zip(prompts, gens, strict=True)):
        n = len(g.token_ids)
        seg = Segment(
            prompt_ids=p,
            response_ids=g.token_ids,
            response_mask=[1] * n,
            response_logprobs=g.logprobs,
            response_versions=[g.policy_version] * n,
        )
        items.append(TrainItem(segment=seg, advantage=(-1.0) ** i, episode_id=f"e{i}", harness="lego-agent"))
    return items, gens


PROMPTS = [[5, 17, 42], [100, 3], [7, 7, 7, 9], [300, 200, 100, 50, 25], [11], [64, 65]]


def test_recompute_reproduces_engine_logprobs_and_sync_carries_the_update(model_dir, make_config):
    engine = engines.TransformersEngine(model_dir, device="cpu", dtype="float32")
    try:
        items, gens = _rollouts(engine, PROMPTS, 1.0)
        trainer = Trainer(model_dir, make_config(micro_batch_size=4))
        rec = [lp for r in trainer.recompute(items) for lp in r]
        eng = [lp for g in gens for lp in g.logprobs]
        fid = fidelity_metrics(eng, rec)
        assert fid[PEARSON] > 0.99999
        assert fid["training/rollout_probs_diff_max"] < 1e-4
        m = trainer.step(items)
        assert m[PEARSON + "/lego-agent"] > 0.99999

        assert InProcessCopy(engine).push(trainer) == engine.policy_version == 1
        items2, gens2 = _rollouts(engine, PROMPTS, 1.0)
        assert all(g.policy_version == 1 for g in gens2)
        m2 = trainer.step(items2)
        assert m2[PEARSON] > 0.99999  # engine and trainer agree on the updated policy
    finally:
        asyncio.run(engine.close())
