import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from lego.algos import PEARSON
from lego.training.checkpoint import load_latest
from lego.training.trainer import Trainer


def _lora_cfg(make_config, **kw):
    return make_config(finetune="lora", lora_rank=4, lora_alpha=8.0, lr=1e-2, **kw)


def _norm_cfg(make_config, **kw):
    return _lora_cfg(make_config, lora_modules_to_save=["norm"], lora_modules_to_save_lr=5e-2, warmup_steps=2, **kw)


def _assert_merged_weights_reproduce_the_policy(trainer, merged, model_dir, items, make_config):
    """A plain model loaded with the merged weights computes the trained (LoRA) policy's logprobs."""
    plain = AutoModelForCausalLM.from_pretrained(model_dir)
    plain.load_state_dict(merged)
    plain_trainer = Trainer(model_dir, make_config())
    plain_trainer.model = plain.eval()
    for a, b in zip(trainer.recompute(items), plain_trainer.recompute(items), strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_lora_trains_only_the_adapter_and_merges_for_the_engine(model_dir, items, make_config):
    trainer = Trainer(model_dir, _lora_cfg(make_config))
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    base_before = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    m = trainer.step(items)
    assert m[PEARSON] > 0.9999  # B starts at zero: the adapter does not change the policy before training
    trainer.step(items)
    merged = trainer.engine_state_dict()
    assert merged.keys() == base_before.keys()
    assert any(not torch.equal(merged[k], base_before[k]) for k in merged)
    _assert_merged_weights_reproduce_the_policy(trainer, merged, model_dir, items, make_config)


@pytest.mark.parametrize("norms", [False, True], ids=["adapter", "adapter+norms"])
def test_lora_checkpoint_adapter_merged_export_and_resume(model_dir, items, make_config, tmp_path, norms):
    cfg = _norm_cfg(make_config) if norms else _lora_cfg(make_config)
    trainer = Trainer(model_dir, cfg)
    trainer.step(items)
    path = trainer.save(tmp_path, export_merged=True)
    assert (path / "adapter" / "adapter_config.json").exists()
    exported = AutoModelForCausalLM.from_pretrained(path).state_dict()
    merged = trainer.engine_state_dict()
    assert all(torch.allclose(exported[k], merged[k]) for k in merged)  # the trained norms too
    m_straight = trainer.step(items)

    resumed = Trainer(model_dir, cfg)
    resumed.load(load_latest(tmp_path))
    want_lrs = [1e-2, 5e-2] if norms else [1e-2]  # each group back at its own lr
    assert [g["lr"] for g in resumed.optimizer.param_groups] == pytest.approx(want_lrs)
    m_resumed = resumed.step(items)
    assert m_resumed["actor/pg_loss"] == pytest.approx(m_straight["actor/pg_loss"], abs=1e-7)
    a, b = trainer.engine_state_dict(), resumed.engine_state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-7) for k in a)


def test_lora_reference_kl_uses_the_base_model(model_dir, items, make_config):
    cfg = _lora_cfg(make_config)
    cfg.algorithm.kl_coef = 0.05
    trainer = Trainer(model_dir, cfg)
    assert trainer.reference is None
    m0 = trainer.step(items)
    assert m0["actor/ref_kl"] == pytest.approx(0.0, abs=1e-9)
    m1 = trainer.step(items)
    assert m1["actor/ref_kl"] > 0


def test_bf16_smoke(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config(dtype="bfloat16"))
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    m = trainer.step(items)
    assert all(math.isfinite(v) for v in m.values())
    assert m[PEARSON] > 0.9  # fp32 sampling vs bf16 recompute: close, not exact
    assert m["actor/grad_norm"] > 0


def test_lora_modules_to_save_train_the_final_norm_at_their_own_lr(model_dir, items, make_config):
    trainer = Trainer(model_dir, _norm_cfg(make_config))
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    saved = [n for n in trainable if ".modules_to_save." in n]
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    norms = [n for n, m in base.named_modules() if type(m).__name__ == "Qwen3RMSNorm"]
    assert len(saved) == len(norms) > 1  # peft matches by name suffix: 'norm' is every RMSNorm, q/k norms too
    assert "base_model.model.model.norm.modules_to_save.default.weight" in saved
    assert all("lora_" in n for n in trainable if n not in saved)
    trainer.step(items)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == pytest.approx([1e-2 / 2, 5e-2 / 2])  # warmup on both
    m = trainer.step(items)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == pytest.approx([1e-2, 5e-2])
    assert (m["actor/lr"], m["actor/lr_modules_to_save"]) == pytest.approx((1e-2, 5e-2))
    base_norm = AutoModelForCausalLM.from_pretrained(model_dir).model.norm.weight
    merged = trainer.engine_state_dict()
    assert merged.keys() == AutoModelForCausalLM.from_pretrained(model_dir).state_dict().keys()
    assert not torch.allclose(merged["model.norm.weight"], base_norm)  # the trained copy, not the frozen original
    wrapper = trainer.model.get_base_model().model.norm
    assert torch.equal(wrapper.original_module.weight, base_norm.detach())  # the base stays the reference
    _assert_merged_weights_reproduce_the_policy(trainer, merged, model_dir, items, make_config)


def test_lora_modules_to_save_errors_name_the_fix(model_dir, make_config):
    from lego.errors import ModelError

    with pytest.raises(ModelError, match=r"lora_modules_to_save: no module name ends with 'final_norm'.*'model\.norm'"):
        Trainer(model_dir, _lora_cfg(make_config, lora_modules_to_save=["final_norm"]))
    only_final = Trainer(model_dir, _lora_cfg(make_config, lora_modules_to_save=["model.norm"]))
    saved = [n for n, p in only_final.model.named_parameters() if p.requires_grad and "lora_" not in n]
    assert saved == ["base_model.model.model.norm.modules_to_save.default.weight"]
