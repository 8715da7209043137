import pytest
import torch

from lego.algos import POLICY_LOSSES, get_policy_loss, gspo_policy_loss, k3_kl, policy_loss_for, token_weights
from lego.config import AlgorithmConfig


def _cfg(**kw):
    return AlgorithmConfig(**kw)


def test_registry_by_name_and_ratio_level():
    assert set(POLICY_LOSSES) == {"gspo", "ppo"}
    assert policy_loss_for(_cfg()) is gspo_policy_loss
    assert policy_loss_for(_cfg(ratio_level="token", clip_low=0.2, clip_high=0.28)) is POLICY_LOSSES["ppo"]
    with pytest.raises(ValueError, match="valid names: gspo, ppo"):
        get_policy_loss("grpo-ish")


def test_token_weights_aggregations():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    w = token_weights(mask, "seq-mean-token-mean")
    assert torch.allclose(w, torch.tensor([[1 / 6, 1 / 6, 1 / 6, 0], [0.5, 0, 0, 0]]))
    w = token_weights(mask, "token-mean")
    assert torch.allclose(w, mask / 4)
    w = token_weights(mask, "seq-mean-token-sum")
    assert torch.allclose(w, mask / 2)
    # rows 0 and 1 one episode: 4 tokens, one episode
    w = token_weights(mask, "seq-mean-token-mean", torch.tensor([0, 0]))
    assert torch.allclose(w, mask / 4)
    with pytest.raises(ValueError, match="unknown aggregation"):
        token_weights(mask, "mean")


def test_gspo_sequence_ratio_value_and_metrics():
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.1, -0.1, 0.3], [0.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = gspo_policy_loss(old, logp, adv, mask, _cfg())
    # row 0: Δ = (0.1 - 0.1)/2 = 0 -> ratio 1; row 1: ratio 1
    assert m["actor/ratio_mean"] == pytest.approx(1.0)
    assert m["actor/pg_clipfrac"] == 0.0
    assert m["actor/tokens"] == 5.0
    assert loss.item() == pytest.approx(0.0, abs=1e-6)


def test_k3_is_nonnegative_and_zero_on_equal():
    a = torch.randn(50)
    b = torch.randn(50)
    assert (k3_kl(a, b) >= 0).all()
    assert torch.equal(k3_kl(a, a), torch.zeros(50))


def test_tis_caps_weights():
    cfg = _cfg(tis_cap=2.0)
    old = torch.zeros(1, 3)
    logp = torch.zeros(1, 3, requires_grad=True)
    rollout = torch.tensor([[0.0, -2.0, -0.1]])  # weights 1, e^2 (capped to 2), e^0.1
    mask = torch.ones(1, 3)
    loss, m = gspo_policy_loss(old, logp, torch.tensor([1.0]), mask, cfg, rollout_logp=rollout)
    expected_w = torch.tensor([1.0, 2.0, float(torch.exp(torch.tensor(0.1)))])
    assert loss.item() == pytest.approx(-(expected_w.mean()).item(), rel=1e-6)
    assert m["actor/tis_clipfrac"] == pytest.approx(1 / 3)


def test_kl_term_added_with_coef():
    cfg = _cfg(kl_coef=0.5)
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    loss, m = gspo_policy_loss(logp.detach(), logp, torch.tensor([0.0]), mask, cfg, ref_logp=ref)
    assert loss.item() == pytest.approx(0.5 * k3_kl(logp.detach(), ref).mean().item())
    assert m["actor/kl_loss"] > 0
