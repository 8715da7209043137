import pytest
import torch

from lego.algos import (
    POLICY_LOSSES,
    LossInputs,
    episode_log_ratio,
    get_policy_loss,
    gspo_log_ratio,
    gspo_policy_loss,
    k3_kl,
    policy_loss_for,
    token_weights,
)
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
    loss, m = gspo_policy_loss(LossInputs(logp=logp, old_logp=old, advantages=adv, mask=mask), _cfg())
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
    inputs = LossInputs(logp=logp, old_logp=old, advantages=torch.tensor([1.0]), mask=mask, rollout_logp=rollout)
    loss, m = gspo_policy_loss(inputs, cfg)
    expected_w = torch.tensor([1.0, 2.0, float(torch.exp(torch.tensor(0.1)))])
    assert loss.item() == pytest.approx(-(expected_w.mean()).item(), rel=1e-6)
    assert m["actor/tis_clipfrac"] == pytest.approx(1 / 3)


def test_kl_term_added_with_coef():
    cfg = _cfg(kl_coef=0.5)
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    loss, m = gspo_policy_loss(
        LossInputs(logp=logp, old_logp=logp.detach(), advantages=torch.tensor([0.0]), mask=mask, ref_logp=ref), cfg
    )
    assert loss.item() == pytest.approx(0.5 * k3_kl(logp.detach(), ref).mean().item())
    assert m["actor/kl_loss"] > 0


def _near_clip_edge(rows: int = 17, t: int = 64, seed: int = 0):
    """fp32 rows whose Δ sits within fp32 rounding of log(1 + clip_high): the ratio's last bits decide."""
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(rows, t, generator=g) * 8.0).requires_grad_(True)  # spread magnitudes: rounding varies
    edge = torch.log1p(torch.tensor(4e-4, dtype=torch.float64))
    target = edge + (torch.rand(rows, 1, generator=g, dtype=torch.float64) - 0.5) * 4e-7
    old = (logp.detach().double() - target).float()
    return logp, old, torch.ones(rows, t, dtype=torch.long)


def test_gspo_ratio_is_bitwise_one_value_per_row_near_the_clip_edge():
    logp, old, mask = _near_clip_edge()
    delta = episode_log_ratio(old, logp, mask)
    ratio = torch.exp(gspo_log_ratio(logp, delta)).detach()  # (B, T)
    assert torch.equal(ratio, ratio[:, :1].expand_as(ratio))  # bitwise: every token of a row shares it
    # The order the issue found, (Δ + logp) − logp, rounds Δ against each token's logp: on the same
    # data some rows end up partly above the clip edge. This proves the data exercises the bug.
    naive = torch.exp(delta[:, None] + logp.detach() - logp.detach())
    above = (naive > 1 + 4e-4).double().mean(-1)
    assert ((above > 0) & (above < 1)).any()

    # The loss clips a row as a whole: a row's tokens either all sit on the clipped branch or none do.
    adv = torch.ones(logp.shape[0])
    cfg = _cfg()
    clipped_rows = []
    for r in range(logp.shape[0]):
        row = slice(r, r + 1)
        _, m = gspo_policy_loss(LossInputs(logp=logp[row], old_logp=old[row], advantages=adv[row], mask=mask[row]), cfg)
        clipped_rows.append(m["actor/pg_clipfrac"])
    assert set(clipped_rows) <= {0.0, 1.0}
    assert set(clipped_rows) == {0.0, 1.0}  # the data straddles the edge: both kinds of row occur


def test_loss_inputs_reject_a_misspelt_or_misshaped_input():
    t = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="rollout_logprobs"):
        LossInputs(logp=t, old_logp=t, advantages=torch.zeros(2), mask=t, rollout_logprobs=t)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"LossInputs\.ref_logp has shape"):
        LossInputs(logp=t, old_logp=t, advantages=torch.zeros(2), mask=t, ref_logp=torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"LossInputs\.advantages has shape"):
        LossInputs(logp=t, old_logp=t, advantages=torch.zeros(2, 3), mask=t)


def test_a_switched_on_term_without_its_input_says_which():
    t = torch.zeros(1, 2)
    inputs = LossInputs(logp=t, old_logp=t, advantages=torch.zeros(1), mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"tis_cap is set but LossInputs\.rollout_logp is None"):
        gspo_policy_loss(inputs, _cfg(tis_cap=2.0))
    with pytest.raises(ValueError, match=r"kl_coef > 0 but LossInputs\.ref_logp is None"):
        gspo_policy_loss(inputs, _cfg(kl_coef=0.1))


@pytest.mark.parametrize("ratio_level", ["sequence", "token"])
def test_token_advantages_equal_to_the_row_s_are_the_scalar_loss_and_otherwise_weigh_each_token(ratio_level):
    torch.manual_seed(0)
    cfg = _cfg(ratio_level=ratio_level, clip_low=0.2, clip_high=0.28)
    loss_fn = policy_loss_for(cfg)
    old = torch.randn(3, 5) * 0.1 - 1.0
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    adv = torch.tensor([1.0, -0.5, 0.25])
    w = token_weights(mask, "seq-mean-token-mean")

    def grads(token_adv):
        logp = (old + torch.randn(3, 5) * 0.05).requires_grad_()
        torch.manual_seed(1)
        inputs = LossInputs(
            logp=logp, old_logp=old, advantages=adv, mask=mask, token_weight=w, token_advantages=token_adv
        )  # fmt: skip
        loss, _ = loss_fn(inputs, cfg)
        loss.backward()
        return loss.detach(), logp.grad

    torch.manual_seed(2)
    scalar = grads(None)
    torch.manual_seed(2)
    spread = grads(adv[:, None].expand(3, 5).clone())
    assert torch.equal(scalar[0], spread[0]) and torch.equal(scalar[1], spread[1])
    # Only token 1 of row 1 pushed (the teacher preferred it): only that token's log-prob gets a gradient,
    # at the token level and at GSPO's (GSPO-token: the ratio's value is the sequence's, its gradient the token's).
    one = torch.zeros(3, 5)
    one[1, 1] = 1.0
    torch.manual_seed(2)
    _, g = grads(one)
    assert (g != 0).nonzero().tolist() == [[1, 1]] and g[1, 1] < 0
