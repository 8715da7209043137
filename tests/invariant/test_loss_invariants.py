"""Settings that must give the same result do (TRL-style invariance tests), on the pure losses.

A tiny differentiable "policy" (a linear layer over random features, log-softmax over a 16-token
vocabulary) stands in for the model so gradients are real and cheap.
"""

import torch

from lego.algos import (
    LossInputs,
    episode_log_ratio,
    group_advantages,
    gspo_policy_loss,
    token_policy_loss,
    token_weights,
)
from lego.config import AlgorithmConfig

GSPO = AlgorithmConfig()
PPO = AlgorithmConfig(ratio_level="token", clip_low=0.2, clip_high=0.28)


def _policy(seed=0, b=4, t=6, v=16, d=8):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(b, t, d, generator=g)
    ids = torch.randint(0, v, (b, t), generator=g)
    w = torch.randn(d, v, generator=g).requires_grad_(True)
    mask = (torch.rand(b, t, generator=g) > 0.3).long()
    mask[:, 0] = 1

    def logp_fn():
        return torch.log_softmax(feats @ w, -1).gather(-1, ids[..., None]).squeeze(-1)

    return w, logp_fn, mask


def _inputs(old, logp, adv, mask, **optional):
    return LossInputs(logp=logp, old_logp=old, advantages=adv, mask=mask, **optional)


def _grad(w, loss):
    (g,) = torch.autograd.grad(loss, w)
    return g


def test_on_policy_ratio_is_exactly_one_and_gradient_is_plain_pg():
    for cfg, fn in ((GSPO, gspo_policy_loss), (PPO, token_policy_loss)):
        for agg in ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum"):
            cfg = cfg.model_copy(update={"aggregation": agg})
            w, logp_fn, mask = _policy()
            adv = torch.tensor([1.0, -0.5, 2.0, -2.5])
            logp = logp_fn()
            old = logp.detach().clone()
            loss, m = fn(_inputs(old, logp, adv, mask), cfg)
            assert m["actor/ratio_max"] == 1.0 and m["actor/ratio_min"] == 1.0
            assert m["actor/pg_clipfrac"] == 0.0
            weights = token_weights(mask, agg)
            plain = -(adv[:, None] * logp_fn() * weights).sum()
            assert torch.allclose(_grad(w, loss), _grad(w, plain), rtol=1e-6, atol=1e-9)


def test_accumulation_1x8_equals_8x1():
    w, logp_fn, mask = _policy(b=8)
    adv = torch.linspace(-1, 1, 8)
    with torch.no_grad():
        old = logp_fn() + 0.01 * torch.randn(8, 6)  # slightly off-policy so clipping is exercised
    weights = token_weights(mask, GSPO.aggregation)
    loss, _ = gspo_policy_loss(_inputs(old, logp_fn(), adv, mask, token_weight=weights), GSPO)
    full = _grad(w, loss)
    acc = torch.zeros_like(full)
    for i in range(8):
        sl = slice(i, i + 1)
        part, _ = gspo_policy_loss(_inputs(old[sl], logp_fn()[sl], adv[sl], mask[sl], token_weight=weights[sl]), GSPO)
        acc += _grad(w, part)
    assert torch.allclose(full, acc, rtol=1e-5, atol=1e-8)


def test_sequence_and_token_ratios_agree_on_length_one_sequences():
    cfg_tok = GSPO.model_copy(update={"ratio_level": "token"})  # same clip range: only the ratio differs
    w, logp_fn, _ = _policy(b=5, t=3)
    mask = torch.zeros(5, 3, dtype=torch.long)
    mask[:, 1] = 1
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.3])
    with torch.no_grad():
        old = logp_fn() + 0.0002 * torch.randn(5, 3)
    ls, ms = gspo_policy_loss(_inputs(old, logp_fn(), adv, mask), GSPO)
    lt, mt = token_policy_loss(_inputs(old, logp_fn(), adv, mask), cfg_tok)
    assert torch.allclose(ls, lt)
    assert ms["actor/pg_clipfrac"] == mt["actor/pg_clipfrac"]
    assert torch.allclose(_grad(w, ls), _grad(w, lt), rtol=1e-6, atol=1e-9)


def test_zero_spread_group_contributes_zero_gradient():
    w, logp_fn, mask = _policy(b=4)
    adv = torch.tensor(group_advantages([1.0, 1.0, 0.0, 0.0], ["same", "same", "zero", "zero"]))
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]
    with torch.no_grad():
        old = logp_fn() + 0.1 * torch.randn(4, 6)  # off-policy too: still nothing
    for fn, cfg in ((gspo_policy_loss, GSPO), (token_policy_loss, PPO)):
        loss, _ = fn(_inputs(old, logp_fn(), adv, mask), cfg)
        assert torch.count_nonzero(_grad(w, loss)) == 0


def test_clipping_bounds_hold():
    # One token per row, ratio pushed out of the trust region both ways.
    logp = torch.zeros(4, 1, requires_grad=True)
    old = torch.tensor([[-0.01], [0.01], [-0.01], [0.01]])  # ratios e^0.01 > 1+eps, e^-0.01 < 1-eps
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    mask = torch.ones(4, 1)
    for fn, cfg in ((gspo_policy_loss, GSPO), (token_policy_loss, GSPO.model_copy(update={"ratio_level": "token"}))):
        loss, m = fn(_inputs(old, logp, adv, mask), cfg)
        (g,) = torch.autograd.grad(loss, logp)
        # A>0 & ratio above 1+eps_high, A<0 & ratio below 1-eps_low: clipped, no gradient
        assert g[0, 0] == 0.0 and g[3, 0] == 0.0
        # the other two stay inside the pessimistic bound and keep their gradient
        assert g[1, 0] < 0.0 and g[2, 0] > 0.0
        assert m["actor/pg_clipfrac"] == 0.5
        # the clipped objective never exceeds A * (1 + eps_high) for A>0
        assert -loss.item() <= (1 + cfg.clip_high) * 0.5 + 1e-7


def test_two_segment_episode_equals_one_segment_with_same_tokens():
    g = torch.Generator().manual_seed(3)
    values = torch.randn(5, generator=g) * 0.1 - 1.0
    old_vals = values + 0.0003 * torch.randn(5, generator=g)
    other = torch.tensor([-0.5, -0.7, -0.2])

    def run(split: bool):
        leaf = values.clone().requires_grad_(True)
        oth = other.clone().requires_grad_(True)
        if split:  # episode 0 as two segments [3 tokens] + [2 tokens, 1 pad]; episode 1 one segment
            logp = torch.stack([leaf[:3], torch.cat([leaf[3:], torch.zeros(1)]), oth])
            old = torch.stack([old_vals[:3], torch.cat([old_vals[3:], torch.zeros(1)]), other])
            mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]])
            ep = torch.tensor([0, 0, 1])
            adv = torch.tensor([1.5, 1.5, -1.0])
        else:
            logp = torch.stack([leaf, torch.cat([oth, torch.zeros(2)])])
            old = torch.stack([old_vals, torch.cat([other, torch.zeros(2)])])
            mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
            ep = torch.tensor([0, 1])
            adv = torch.tensor([1.5, -1.0])
        weights = token_weights(mask, GSPO.aggregation, ep)
        delta = episode_log_ratio(old, logp, mask, ep)
        loss, _ = gspo_policy_loss(_inputs(old, logp, adv, mask, token_weight=weights, seq_log_ratio=delta), GSPO)
        loss.backward()
        return loss.detach(), leaf.grad, oth.grad

    l1, g1, o1 = run(True)
    l2, g2, o2 = run(False)
    assert torch.allclose(l1, l2, atol=1e-7)
    assert torch.allclose(g1, g2, atol=1e-7) and torch.allclose(o1, o2, atol=1e-7)
