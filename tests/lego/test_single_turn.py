"""SingleTurnLoop over the real stack: real HTTP proxy, real engine and trainer on the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from lego.conductor.single_turn import SingleTurnLoop
from lego.config import LegoConfig, ProxyConfig
from lego.engines.transformers_engine import TransformersEngine
from lego.models.chat import ChatFormat
from lego.proxies.server import ProxyServer
from lego.training.trainer import Trainer

G, MAX_TOKENS = 3, 6
PROMPTS = [
    [{"role": "user", "content": "Name a data structure."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}],
]


def _reward(text: str) -> float:
    return float(len(text))


@pytest.fixture
def loop(tiny_model_dir: Path) -> Iterator[SingleTurnLoop]:
    cfg = LegoConfig.model_validate({"training": {"lr": 1e-3, "micro_batch_size": 2}})
    engine = TransformersEngine(tiny_model_dir, num_threads=1, max_batch_size=8)
    trainer = Trainer(tiny_model_dir, cfg, device="cpu")
    server = ProxyServer(engine, ChatFormat.from_pretrained(tiny_model_dir), ProxyConfig(port=0))
    server.start()
    try:
        with SingleTurnLoop(trainer, engine, server, _reward, group_size=G, max_tokens=MAX_TOKENS) as loop:
            yield loop
    finally:
        server.stop()


def _weights(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_step_records_every_completion_and_updates_the_served_policy(
    loop: SingleTurnLoop, chat_format: ChatFormat
) -> None:
    before = _weights(loop.trainer.model)
    result = loop.step(PROMPTS)

    assert len(result.trajectories) == len(result.completions) == len(PROMPTS) * G
    for k, traj in enumerate(result.trajectories):
        messages = PROMPTS[k // G]
        (seg,) = traj.segments
        assert seg.prompt_ids == chat_format.render(messages, add_generation_prompt=True)
        assert 1 <= seg.num_sampled <= MAX_TOKENS
        assert traj.task_id == f"prompt-{k // G}"
        assert traj.reward == _reward(result.completions[k]) == result.rewards[k]
    assert result.completion_tokens == sum(t.num_sampled_tokens for t in result.trajectories)

    # group-normalised advantages: zero mean within each prompt's group
    assert len(result.items) == len(PROMPTS) * G  # one segment per rollout, in rollout order
    for p in range(len(PROMPTS)):
        group = [it.advantage for it in result.items[p * G : (p + 1) * G]]
        assert sum(group) == pytest.approx(0.0, abs=1e-9)
        assert len({it.episode_id for it in result.items[p * G : (p + 1) * G]}) == G

    assert result.metrics["training/rollout_actor_probs_pearson_corr"] > 0.99
    assert result.policy_version == loop.engine.policy_version == 1  # type: ignore[attr-defined]
    after = _weights(loop.trainer.model)
    assert any(not torch.equal(before[k], after[k]) for k in before), "the update changed no weight"
    served = loop.engine.model.state_dict()  # type: ignore[attr-defined]
    assert all(torch.equal(served[k], after[k]) for k in after), "the engine does not serve the trained weights"
    assert not loop.server.service.sessions, "sessions must be closed after their trajectory is read"
    assert set(result.timings) == {"rollout_s", "rollout_engine_s", "train_s", "sync_s", "step_s"}
    assert 0 < result.timings["rollout_engine_s"] < result.timings["rollout_s"]


def test_second_step_samples_from_the_synced_policy(loop: SingleTurnLoop) -> None:
    loop.step(PROMPTS)
    second = loop.step(PROMPTS)
    versions = {v for t in second.trajectories for s in t.segments for v in s.response_versions if v is not None}
    assert versions == {1}
    assert second.policy_version == 2


def test_step_needs_prompts(loop: SingleTurnLoop) -> None:
    with pytest.raises(ValueError, match="at least one prompt"):
        loop.step([])
