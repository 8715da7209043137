# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
"""A random tiny Qwen3-MoE on the real Qwen3 tokenizer through the engine, the proxy and one GSPO
step. Routing is computed independently on both sides here (engine and trainer hold separate
copies of the weights), so the router logits are compared as a fidelity measure: where a
vLLM engine routes differently, its routed experts per token would be replayed in the trainer's
forward, and this comparison is what would show the need."""

from __future__ import annotations

from pathlib import Path

import openai
import torch

from lego.algos import PEARSON
from lego.config import LegoConfig, ProxyConfig
from lego.engines.transformers_engine import TransformersEngine
from lego.models.chat import ChatFormat
from lego.models.families import family
from lego.models.tiny import build_tiny_on
from lego.proxies.server import ProxyServer
from lego.training.items import items_from_trajectories
from lego.training.trainer import Trainer
from tests.families.conftest import require


def test_tiny_qwen3_moe_through_engine_proxy_and_trainer(tmp_path: Path) -> None:
    f = require(family("qwen3"))
    model_dir = build_tiny_on(f.tokenizer_dir(), tmp_path / "moe", "qwen3_moe")
    chat = ChatFormat.from_pretrained(model_dir)
    engine = TransformersEngine(model_dir, device="cpu", max_batch_size=2, seed=0)
    messages = [{"role": "user", "content": "Say something."}]
    with ProxyServer(engine, chat, ProxyConfig(port=0)) as srv:
        client = openai.OpenAI(base_url=srv.session_base_url("s"), api_key="k", max_retries=0)
        for turn in range(2):
            r = client.chat.completions.create(model="m", messages=messages, max_tokens=16, temperature=1.0)
            messages += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"More {turn}."},
            ]
        traj = srv.trajectory("s")
    items = items_from_trajectories([traj.model_copy(update={"reward": 1.0})], advantages=[1.0])
    trainer = Trainer(model_dir, LegoConfig.model_validate({"training": {"micro_batch_size": 2, "lr": 1e-3}}))

    # Router agreement on the recorded sequences, before the update: same experts chosen per token.
    for item in items:
        ids = torch.tensor([item.segment.input_ids])
        with torch.no_grad():
            served = engine.model(input_ids=ids, output_router_logits=True).router_logits
            trained = trainer.model(input_ids=ids, output_router_logits=True).router_logits
        for a, b in zip(served, trained, strict=True):
            assert torch.equal(a.topk(2, dim=-1).indices.sort(-1).values, b.topk(2, dim=-1).indices.sort(-1).values)
            assert (a - b).abs().max().item() <= 1e-5

    metrics = trainer.step(items)
    assert metrics[PEARSON] >= 0.999, metrics
