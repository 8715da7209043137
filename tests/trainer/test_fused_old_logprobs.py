"""π_old from the loss pass's own forward equals a separate recompute pass.

``Trainer.step(items)`` takes log π_old as the detached log-probs of each micro-batch's forward
with grad (one optimizer update per batch: the weights cannot change in between), instead of a
separate no-grad pass. These tests pin that this is only a saving: the gradients, the updated
weights and the fidelity metrics are those of the explicit ``old_logprobs=recompute(items)`` path,
and the gate still stops a bad update before the weights move."""

import pytest
import torch

from lego.algos import PEARSON
from lego.conductor.trainer import Trainer
from lego.errors import FidelityError


def _grads(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def _fidelity(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k.startswith(("training/", "rollout_corr/"))}


@pytest.mark.parametrize("ratio_level", ["sequence", "token"])
def test_fused_pi_old_equals_explicit_recompute(model_dir, items, make_config, ratio_level):
    cfg = make_config(micro_batch_size=3)  # 8 items -> 3 micro-batches of different shapes
    cfg.algorithm.ratio_level = ratio_level
    cfg.algorithm.tis_cap = 2.0  # π_old also feeds the TIS weights
    fused, explicit = Trainer(model_dir, cfg), Trainer(model_dir, cfg)

    m_fused = fused.compute_gradients(items)
    m_explicit = explicit.compute_gradients(items, old_logprobs=explicit.recompute(items))
    g_fused, g_explicit = _grads(fused), _grads(explicit)
    assert g_fused.keys() == g_explicit.keys() and g_fused
    assert any(float(g.abs().max()) > 0 for g in g_fused.values())
    for name, g in g_fused.items():
        assert float((g - g_explicit[name]).abs().max()) <= 1e-7, name

    fid = _fidelity(m_fused)
    assert PEARSON + "/ha" in fid and PEARSON + "/hb" in fid
    assert fid == pytest.approx(_fidelity(m_explicit), abs=1e-12)
    for key in ("actor/pg_loss", "actor/ppo_kl", "actor/ratio_mean", "actor/tis_weight_mean", "actor/entropy"):
        assert m_fused[key] == pytest.approx(m_explicit[key], abs=1e-7), key
    assert set(m_fused) == set(m_explicit)

    fused.apply_gradients()
    explicit.apply_gradients()
    w_explicit = explicit.model.state_dict()
    for name, w in fused.model.state_dict().items():
        assert float((w - w_explicit[name]).abs().max()) <= 1e-7, name


def test_fused_step_matches_explicit_step_over_two_updates(model_dir, items, make_config):
    """Through ``step`` itself, twice (the second step sees moved weights and AdamW state)."""
    cfg = make_config(micro_batch_size=4)
    fused, explicit = Trainer(model_dir, cfg), Trainer(model_dir, cfg)
    for _ in range(2):
        m_fused = fused.step(items)
        m_explicit = explicit.step(items, old_logprobs=explicit.recompute(items))
        assert _fidelity(m_fused) == pytest.approx(_fidelity(m_explicit), abs=1e-12)
        assert m_fused["actor/grad_norm"] == pytest.approx(m_explicit["actor/grad_norm"], abs=1e-7)
    w_explicit = explicit.model.state_dict()
    for name, w in fused.model.state_dict().items():
        assert float((w - w_explicit[name]).abs().max()) <= 1e-7, name


def test_tripped_gate_leaves_weights_grads_and_optimizer_untouched(model_dir, items, make_config):
    cfg = make_config(micro_batch_size=3)
    cfg.algorithm.temperature = 0.25  # the engine sampled at 1.0: Pearson far below 0.99
    cfg.training.fidelity.patience = 1
    trainer = Trainer(model_dir, cfg)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(FidelityError, match=PEARSON):
        trainer.step(items)
    assert trainer.step_count == 0
    assert all(p.grad is None for p in trainer.model.parameters())  # the backward's gradients were dropped
    assert not trainer.optimizer.state  # AdamW never stepped
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
