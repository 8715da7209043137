"""A tiny random Qwen3 (hidden 64, 2 layers, vocab 512) saved as an HF model dir, and recorded
segments sampled from it, so trainer tests run in seconds on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from lego.config import LegoConfig
from lego.training.trainer import TrainItem
from lego.types import Segment

VOCAB = 512


def build_model_dir(out: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(out)
    (out / "tokenizer_config.json").write_text('{"model_max_length": 256}')
    return out


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny_qwen3"))


def _make_config(**training) -> LegoConfig:
    base = {"micro_batch_size": 8, "lr": 1e-3, "grad_clip": 1.0}
    base.update(training)
    return LegoConfig.model_validate({"training": base})


@pytest.fixture
def make_config():
    """``make_config(**training_fields) -> LegoConfig`` (GSPO defaults, lr 1e-3 so steps move weights)."""
    return _make_config


@torch.no_grad()
def _sample_segment(model, prompt: list[int], n: int, temperature: float, gen: torch.Generator, tool: list[int] = ()):
    """Sample ``n`` tokens at ``temperature`` (recording logprobs as an engine would), then append
    ``tool`` tokens with mask 0 and sample ``n`` more if given."""
    ids, mask, lps = list(prompt), [], []

    def sample(k):
        for _ in range(k):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float() / temperature
            logp = torch.log_softmax(logits, -1)
            tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
            ids.append(tok)
            mask.append(1)
            lps.append(float(logp[tok]))

    sample(n)
    if tool:
        ids.extend(tool)
        mask.extend([0] * len(tool))
        lps.extend([None] * len(tool))
        sample(n)
    resp = ids[len(prompt) :]
    return Segment(
        prompt_ids=list(prompt),
        response_ids=resp,
        response_mask=mask,
        response_logprobs=lps,
        response_versions=[0 if m else None for m in mask],
    )


@pytest.fixture
def sample_segment():
    """``sample_segment(model, prompt, n, temperature, generator, tool=()) -> Segment``."""
    return _sample_segment


@pytest.fixture(scope="session")
def items(model_dir: Path) -> list[TrainItem]:
    """8 segments from 4 tasks x 2 rollouts; one rollout has a tool observation inside."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(8):
        prompt = torch.randint(1, VOCAB, (3 + i % 3,), generator=gen).tolist()
        tool = [7, 8, 9] if i == 3 else []
        seg = _sample_segment(model, prompt, 3 + i % 4, 1.0, gen, tool)
        out.append(
            TrainItem(
                segment=seg,
                advantage=[1.0, -1.0][i % 2] * (1 + i / 10),
                episode_id=f"ep{i}",
                harness="ha" if i < 5 else "hb",
            )
        )
    return out
