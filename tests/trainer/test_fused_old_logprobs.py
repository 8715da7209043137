"""π_old from the loss pass's own forward equals a separate recompute pass.

``Trainer.step(items)`` takes log π_old as the detached log-probs of each micro-batch's forward
with grad (one optimizer update per batch: the weights cannot change in between), instead of a
separate no-grad pass. These tests pin that this is only a saving: the gradients, the updated
weights and the fidelity metrics are those of the explicit ``old_logprobs=recompute(items)`` path,
and the gate still stops a bad update before the weights move."""

import pytest
import torch

from lego.algos import PEARSON
from lego.errors import FidelityError
from lego.training.trainer import Trainer


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


def test_ppo_epochs_reuse_the_batch_against_the_sampling_weights(model_dir, items, make_config):
    """``training.ppo_epochs = 3``: the first update is ``step`` itself, the next two are explicit
    updates against π_old recomputed *before* the first one (not against the moved weights), the
    whole is one step, and a tripped gate still leaves everything untouched."""
    cfg = make_config(micro_batch_size=4)
    cfg.algorithm.ratio_level, cfg.algorithm.clip_low, cfg.algorithm.clip_high = "token", 0.2, 0.28
    cfg.training.ppo_epochs = 3
    by_epochs, by_hand = Trainer(model_dir, cfg), Trainer(model_dir, cfg)

    m = by_epochs.train_step(items)
    assert by_epochs.step_count == 1
    old = by_hand.recompute(items)
    first = by_hand.step(items)
    for _ in range(2):
        last = by_hand.compute_gradients(items, old_logprobs=old)
        last["actor/grad_norm"] = by_hand.apply_gradients()
    w_hand = by_hand.model.state_dict()
    for name, w in by_epochs.model.state_dict().items():
        assert float((w - w_hand[name]).abs().max()) <= 1e-7, name
    assert _fidelity(m) == pytest.approx(_fidelity(first), abs=1e-12)
    # the reused batch is off-policy by then: ratios moved away from 1 and the KL to π_old is positive
    assert m["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert m["actor/last_epoch/ppo_kl"] == pytest.approx(last["actor/ppo_kl"], abs=1e-9) and last["actor/ppo_kl"] != 0.0
    assert m["actor/last_epoch/ratio_max"] > 1.0
    assert m["actor/last_epoch/grad_norm"] == pytest.approx(last["actor/grad_norm"], rel=1e-6)

    one = Trainer(model_dir, make_config(micro_batch_size=4))
    one.train_step(items)  # ppo_epochs = 1 is exactly step()
    assert any(
        float((w - one.model.state_dict()[n]).abs().max()) > 1e-6 for n, w in by_epochs.model.state_dict().items()
    )

    cfg.algorithm.temperature = 0.25  # the engine sampled at 1.0: the gate trips on the first update
    cfg.training.fidelity.patience = 1
    gated = Trainer(model_dir, cfg)
    before = {k: v.clone() for k, v in gated.model.state_dict().items()}
    with pytest.raises(FidelityError, match=PEARSON):
        gated.train_step(items)
    assert gated.step_count == 0 and not gated.optimizer.state
    assert all(torch.equal(before[k], v) for k, v in gated.model.state_dict().items())
