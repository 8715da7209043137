"""Weights that change mid-rollout (issue 29's acceptance test): the in-process engine swaps them
between decode steps while three generations are in flight, twice. Each token must record the
version that sampled it, its logprob must be teacher forcing under that version's weights, and the
trainer's loss must be today's when every token is from the current version, and the documented
off-policy correction when not (lego.algos.losses)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import torch

from lego.config import LegoConfig
from lego.engines.transformers_engine import TransformersEngine
from lego.training.trainer import Trainer, TrainItem
from lego.types import Generation, SamplingParams, Segment

MAX_TOKENS = 120  # room for both swaps to land inside even on a loaded machine


def teacher_forced(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> list[float]:
    """log p of each completion token at temperature 1 from one unpadded forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits, dim=-1)
    return [logp[len(prompt) - 1 + i, tok].item() for i, tok in enumerate(completion)]


def scaled(model: torch.nn.Module, factor: float) -> dict[str, torch.Tensor]:
    return {k: v * factor for k, v in model.state_dict().items() if k.endswith("mlp.down_proj.weight")}


@pytest.fixture(scope="module")
def rollouts(tiny_model_dir, chat_format) -> tuple[list[list[int]], list[Generation], list[Generation], list[Any]]:
    """Three generations of MAX_TOKENS with two weight swaps landing in them, three more queued
    after the second swap (all version 2), and the weights of versions 0, 1 and 2."""
    engine = TransformersEngine(tiny_model_dir, max_model_len=512)
    engine.eos_token_ids = []  # every row runs to MAX_TOKENS, so both swaps land mid-generation
    prompts = [
        chat_format.render(
            [{"role": "user", "content": "Fix the failing test. " * i + f"Request {i}"}], add_generation_prompt=True
        )
        for i in range(3)
    ]
    weights = [copy.deepcopy(engine.model)]

    async def until(tokens: int) -> None:
        while engine.stats["generated_tokens"] < tokens:
            await asyncio.sleep(0.001)

    async def run() -> tuple[list[Generation], list[Generation]]:
        rows = [
            asyncio.create_task(engine.generate(p, SamplingParams(max_tokens=MAX_TOKENS, seed=i)))
            for i, p in enumerate(prompts)
        ]
        await until(3 * 10)
        assert await asyncio.to_thread(engine.load_weights, scaled(engine.model, 0.5)) == 1
        weights.append(copy.deepcopy(engine.model))
        await until(engine.stats["generated_tokens"] + 3 * 10)
        assert await asyncio.to_thread(engine.load_weights, scaled(engine.model, 3.0)) == 2
        weights.append(copy.deepcopy(engine.model))
        late = [engine.generate(p, SamplingParams(max_tokens=16, seed=9 + i)) for i, p in enumerate(prompts)]
        return list(await asyncio.gather(*rows)), list(await asyncio.gather(*late))

    gens, late = asyncio.run(run())
    assert engine.stats["swaps_mid_batch"] == 2 and engine.stats["reprefilled_rows"] == 6
    asyncio.run(engine.close())
    return prompts, gens, late, weights


def test_each_token_records_the_version_that_sampled_it(rollouts) -> None:
    _, gens, late, _ = rollouts
    for gen in gens:
        assert len(gen.token_ids) == MAX_TOKENS and gen.policy_version == 0  # the swaps cut nothing short
        assert gen.versions == sorted(gen.versions) and set(gen.versions) == {0, 1, 2}  # both swaps landed inside
    assert all(set(g.versions) == {2} for g in late)
    round_trip = Generation.model_validate_json(gens[0].model_dump_json())
    assert round_trip.versions == gens[0].versions
    old = Generation.model_validate(
        {"token_ids": [1, 2], "logprobs": [-0.1, -0.2], "finish_reason": "stop", "policy_version": 4}
    )
    assert old.versions == [4, 4]  # a record from before per-token versions loads as one version


def test_each_tokens_logprob_is_teacher_forcing_under_its_own_version(rollouts) -> None:
    prompts, gens, late, weights = rollouts
    for prompt, gen in [*zip(prompts, gens, strict=True), *zip(prompts, late, strict=True)]:
        forced = [teacher_forced(model, prompt, gen.token_ids) for model in weights]
        own = [forced[v][i] for i, v in enumerate(gen.versions)]
        assert max(abs(a - b) for a, b in zip(gen.logprobs, own, strict=True)) <= 1e-4
        if gen in gens:  # and the labels matter: the previous version's weights give other logprobs
            stale = [forced[v - 1][i] for i, v in enumerate(gen.versions) if v > 0]
            swapped = [lp for lp, v in zip(gen.logprobs, gen.versions, strict=True) if v > 0]
            assert max(abs(a - b) for a, b in zip(swapped, stale, strict=True)) > 1e-2


def _items(prompts: list[list[int]], gens: list[Generation], versions=None) -> list[TrainItem]:
    items = []
    for i, (p, g) in enumerate(zip(prompts, gens, strict=True)):
        n = len(g.token_ids)
        seg = Segment(
            prompt_ids=p,
            response_ids=g.token_ids,
            response_mask=[1] * n,
            response_logprobs=g.logprobs,
            response_versions=g.versions if versions is None else [versions] * n,
        )
        items.append(TrainItem(segment=seg, advantage=[1.0, -0.5, 0.25][i], episode_id=f"e{i}", harness="h"))
    return items


def _trainer(tiny_model_dir, weights: torch.nn.Module, **algorithm) -> Trainer:
    if algorithm.get("ratio_level") == "token":
        algorithm.update(clip_low=0.2, clip_high=0.28)
    cfg = LegoConfig.model_validate({"training": {"micro_batch_size": 2, "lr": 1e-3}, "algorithm": algorithm})
    trainer = Trainer(tiny_model_dir, cfg, device="cpu")
    trainer.model.load_state_dict(weights.state_dict())  # the trainer holds version 2's weights
    return trainer


def _grads(trainer: Trainer) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    trainer.optimizer.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("ratio_level", ["sequence", "token"])
def test_the_loss_with_every_token_current_is_todays(tiny_model_dir, rollouts, ratio_level) -> None:
    """k = 0: every token sampled by the trainer's own version (the rollouts after the swaps).
    Today's loss at the single on-policy update is −mean(A) (ratio 1, one episode a row,
    seq-mean-token-mean), whatever algorithm.off_policy says, and the gradient is that of the same
    batch recording no versions (the path of a record from before them)."""
    prompts, _, late, weights = rollouts
    trainer = _trainer(tiny_model_dir, weights[2], ratio_level=ratio_level, off_policy="tis")
    current = trainer.compute_gradients(_items(prompts, late), policy_version=2)
    g_current = _grads(trainer)
    unlabelled = trainer.compute_gradients(_unversioned(prompts, late))
    g_unlabelled = _grads(trainer)
    assert current["actor/pg_loss"] == pytest.approx(-(1.0 - 0.5 + 0.25) / 3, abs=1e-7)
    assert abs(current["actor/pg_loss"] - unlabelled["actor/pg_loss"]) <= 1e-7
    assert all(torch.equal(a, b) for a, b in zip(g_current, g_unlabelled, strict=True))
    assert current["training/staleness_max"] == 0.0 and "actor/stale_frac" not in current


def _unversioned(prompts: list[list[int]], gens: list[Generation]) -> list[TrainItem]:
    """The same segments recording no versions (None: counted as the trainer's own)."""
    return [
        it.model_copy(
            update={
                "segment": it.segment.model_copy(update={"response_versions": [None] * len(it.segment.response_ids)})
            }
        )
        for it in _items(prompts, gens)
    ]


@pytest.mark.parametrize(
    ("ratio_level", "off_policy"), [("token", "decoupled"), ("token", "tis"), ("sequence", "decoupled")]
)
def test_stale_tokens_get_the_documented_correction(tiny_model_dir, rollouts, ratio_level, off_policy) -> None:
    """The trainer at version 2 over the mixed rollouts: lags 2, 1, 0; fidelity over the lag-0
    tokens only; the loss at the on-policy update is −A·f(w) with w = π_2/π_behav from teacher forcing."""
    prompts, gens, _, weights = rollouts
    cap = 2.0
    trainer = _trainer(
        tiny_model_dir, weights[2], ratio_level=ratio_level, off_policy=off_policy, behaviour_weight_cap=cap
    )
    m = trainer.compute_gradients(_items(prompts, gens), policy_version=2)
    _grads(trainer)

    lags = [2 - v for g in gens for v in g.versions]
    assert m["training/staleness_max"] == 2.0 and m["training/staleness_mean"] == pytest.approx(sum(lags) / len(lags))
    assert m["rollout_corr/tokens/lag_0"] == lags.count(0) and m["rollout_corr/tokens/lag_2"] == lags.count(2)
    assert m["rollout_corr/tokens"] == lags.count(0) and m["training/rollout_actor_probs_pearson_corr"] >= 0.9999

    def f(w: float) -> float:
        return (w if w <= cap else 0.0) if off_policy == "decoupled" else min(w, cap)

    expected = 0.0
    for prompt, gen, adv in zip(prompts, gens, [1.0, -0.5, 0.25], strict=True):
        prox = teacher_forced(weights[2], prompt, gen.token_ids)
        log_w = [p - r if v < 2 else 0.0 for p, r, v in zip(prox, gen.logprobs, gen.versions, strict=True)]
        if ratio_level == "token":
            row = sum(-adv * f(float(torch.tensor(x).exp())) for x in log_w) / len(log_w)
        else:
            row = -adv * f(float(torch.tensor(sum(log_w) / len(log_w)).exp()))
        expected += row / 3
    assert m["actor/pg_loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert m["actor/stale_frac"] == pytest.approx(sum(1 for x in lags if x) / len(lags))
