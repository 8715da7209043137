# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
"""A real pretrained checkpoint end to end: SmolLM2-135M-Instruct imported from its GGUF
(``lego models import``), served by the in-process engine behind the proxy to the official OpenAI
client, the recorded logprobs checked against teacher forcing, one LoRA GSPO step with
rollout/trainer Pearson >= 0.999."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

from lego.algos import PEARSON
from lego.conductor.cli.models import models_group
from lego.config import LegoConfig, ProxyConfig
from lego.engines.transformers_engine import TransformersEngine
from lego.models.chat import ChatFormat
from lego.models.check import check_model_dir
from lego.paths import cache_dir
from lego.proxies.server import ProxyServer
from lego.training.items import items_from_trajectories
from lego.training.trainer import Trainer

pytestmark = pytest.mark.slow

GGUF = cache_dir() / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf", reason="reading GGUF needs the gguf package (pip install -e '.[dev]')")
    if not GGUF.is_file():
        pytest.skip(f"{GGUF} is absent; run scripts/fetch_smollm2.sh")
    out = tmp_path_factory.mktemp("smollm2") / "hf"
    result = CliRunner().invoke(models_group, ["import", str(GGUF), str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_import_keeps_embeddings_tied_and_reports_the_tool_less_template(smollm2: Path) -> None:
    report = check_model_dir(smollm2)
    assert report.architecture == "LlamaForCausalLM" and report.vocab_size == 49152
    assert report.tied_embeddings is True and report.lm_head_stored is False
    assert report.stop_tokens == ["<|im_end|> (2)"]
    assert not report.supports_tools and "--chat-template" in report.problems[0]


def test_served_recorded_and_trained_one_lora_step(smollm2: Path) -> None:
    chat = ChatFormat.from_pretrained(smollm2)
    engine = TransformersEngine(smollm2, device="cpu", max_batch_size=2, seed=0)
    messages = [{"role": "user", "content": "Name one prime number."}]
    with ProxyServer(engine, chat, ProxyConfig(port=0)) as srv:
        client = openai.OpenAI(base_url=srv.session_base_url("s"), api_key="k", max_retries=0)
        r = client.chat.completions.create(model="m", messages=messages, max_tokens=12, temperature=1.0)
        messages += [
            {"role": "assistant", "content": r.choices[0].message.content},
            {"role": "user", "content": "Another?"},
        ]
        client.chat.completions.create(model="m", messages=messages, max_tokens=12, temperature=1.0)
        with pytest.raises(openai.BadRequestError, match="--chat-template"):
            tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
            client.chat.completions.create(model="m", messages=messages, tools=[tool], max_tokens=4)
        traj = srv.trajectory("s")
    assert traj.counters["calls"] == 2
    for seg in traj.segments:
        (forward,) = engine.score_sync([seg.input_ids], [len(seg.prompt_ids)], 1.0)
        pairs = [(lp, f) for lp, f, m in zip(seg.response_logprobs, forward, seg.response_mask, strict=True) if m]
        assert pairs and max(abs(lp - f) for lp, f in pairs) <= 1e-4
    cfg = LegoConfig.model_validate(
        {"training": {"finetune": "lora", "lora_rank": 8, "micro_batch_size": 2, "lr": 1e-4, "grad_clip": 1.0}}
    )
    items = items_from_trajectories([traj.model_copy(update={"reward": 1.0})], advantages=[1.0])
    metrics = Trainer(smollm2, cfg).step(items)
    assert metrics[PEARSON] >= 0.999, metrics
