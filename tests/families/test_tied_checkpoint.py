"""A LoRA checkpoint of a tied-embedding model (a tiny Qwen3 on the real Qwen3 tokenizer) keeps the
embeddings tied: no lm_head copy in the merged export, and it loads to the trained policy."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from lego.config import LegoConfig
from lego.models.families import family
from lego.models.tiny import build_tiny_on
from lego.training.trainer import Trainer
from tests.families.conftest import require


def test_lora_checkpoint_of_a_tied_model_stores_one_embedding(tmp_path: Path) -> None:
    f = require(family("qwen3"))
    model_dir = build_tiny_on(f.tokenizer_dir(), tmp_path / "m", f.model_type)
    trainer = Trainer(model_dir, LegoConfig.model_validate({"training": {"finetune": "lora", "lora_rank": 4}}))
    ckpt = trainer.save(tmp_path / "run", export_merged=True)
    with safe_open(str(ckpt / "model.safetensors"), "pt") as st:
        names = list(st.keys())
    assert not any(n.endswith("lm_head.weight") for n in names)
    size = (ckpt / "model.safetensors").stat().st_size
    assert size <= (model_dir / "model.safetensors").stat().st_size * 1.01  # no second vocab x hidden matrix
    loaded = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    assert loaded.get_output_embeddings().weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = trainer.model(input_ids=ids).logits
        got = loaded(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
