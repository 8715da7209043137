"""The off-policy correction (lego.algos.losses, issue 29) against hand computation: tokens of older
policy versions are weighted by w = π_prox/π_behav outside the clip, dropped above the cap
(decoupled, AReaL) or cut to it (tis); current-version tokens are untouched, bit for bit; and the
fidelity metrics compare only current-version tokens, reporting the rest per version lag."""

from __future__ import annotations

import math

import pytest
import torch

from lego.algos import (
    PEARSON,
    LossInputs,
    behaviour_log_weight,
    fidelity_metrics,
    gspo_policy_loss,
    token_policy_loss,
)
from lego.config import AlgorithmConfig

GSPO = AlgorithmConfig(behaviour_weight_cap=2.0)
PPO = AlgorithmConfig(ratio_level="token", clip_low=0.2, clip_high=0.28, behaviour_weight_cap=2.0)


def _inputs(**kw) -> LossInputs:
    """Two rows of four tokens, the last of row 1 padding; at the on-policy update (old = logp)."""
    torch.manual_seed(0)
    logp = torch.log(torch.rand(2, 4) * 0.8 + 0.1).requires_grad_()
    base = {
        "logp": logp,
        "old_logp": logp.detach(),
        "advantages": torch.tensor([1.0, -0.5]),
        "mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "rollout_logp": logp.detach() + torch.tensor([[0.0, 0.01, -1.0, -0.3], [0.2, 0.0, 0.0, float("nan")]]),
    }
    base.update(kw)
    return LossInputs(**base)


@pytest.mark.parametrize("loss", [gspo_policy_loss, token_policy_loss])
@pytest.mark.parametrize("tis_cap", [None, 1.5])
def test_no_stale_token_is_todays_loss_bit_for_bit(loss, tis_cap) -> None:
    cfg = (GSPO if loss is gspo_policy_loss else PPO).model_copy(update={"tis_cap": tis_cap, "off_policy": "tis"})
    today = _inputs()
    current = _inputs(version_lag=torch.zeros(2, 4, dtype=torch.long))
    (a, ma), (b, mb) = loss(today, cfg), loss(current, cfg)
    a.backward()
    b.backward()
    assert torch.equal(a, b) and ma == mb
    assert torch.equal(today.logp.grad, current.logp.grad)


@pytest.mark.parametrize(
    ("off_policy", "f"), [("decoupled", lambda w: w if w <= 2.0 else 0.0), ("tis", lambda w: min(w, 2.0))]
)
def test_token_level_weights_each_stale_token_by_its_own_ratio(off_policy, f) -> None:
    lag = torch.tensor([[0, 1, 1, 1], [2, 0, 0, 0]])
    x = _inputs(version_lag=lag)
    loss, m = token_policy_loss(x, PPO.model_copy(update={"off_policy": off_policy}))
    log_w = (x.old_logp - x.rollout_logp).tolist()  # π_prox / π_behav at every stale token
    rows = [[1.0 if lag[i][t] == 0 else f(math.exp(log_w[i][t])) for t in range(4) if x.mask[i][t]] for i in range(2)]
    expected = sum(-float(a) * sum(r) / len(r) for a, r in zip(x.advantages, rows, strict=True)) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert m["actor/stale_frac"] == pytest.approx(4 / 7)
    # e^{1.0} > 2 at token (0, 2): dropped (decoupled) or cut to 2 (tis)
    key = "actor/behaviour_dropfrac" if off_policy == "decoupled" else "actor/behaviour_clipfrac"
    assert m[key] == pytest.approx(1 / 7)


def test_gspo_weights_a_mixed_sequence_by_its_length_normalised_ratio() -> None:
    """Row 0 has tokens of versions v, v-1 and v-1 (lags 0, 1, 1, 0): log w = mean over its four
    tokens of (log π_prox − log π_behav), each against its own version, 0 at the current ones."""
    lag = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])
    x = _inputs(version_lag=lag)
    log_w = behaviour_log_weight(x.old_logp, x.rollout_logp, x.mask, lag)
    assert float(log_w[0]) == pytest.approx((-0.01 + 1.0) / 4) and float(log_w[1]) == 0.0
    loss, m = gspo_policy_loss(x, GSPO.model_copy(update={"off_policy": "tis"}))
    expected = (-1.0 * math.exp((-0.01 + 1.0) / 4) + 0.5) / 2  # ratio 1 on-policy; row 1 keeps w = 1
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert m["actor/stale_frac"] == pytest.approx(2 / 7)


def test_gspo_episode_weight_given_applies_to_rows_without_stale_tokens() -> None:
    """An episode's weight is pooled over all its rows (the trainer adds the sums across micro-batches);
    a row of it with no stale token of its own still carries it, and w over the cap drops it."""
    x = _inputs(version_lag=torch.zeros(2, 4, dtype=torch.long), seq_behaviour_log_weight=torch.tensor([0.5, 1.0]))
    loss, m = gspo_policy_loss(x, GSPO)
    assert float(loss.detach()) == pytest.approx(-1.0 * math.exp(0.5) / 2)  # row 1: e^1 > 2, dropped
    assert m["actor/behaviour_dropfrac"] == pytest.approx(3 / 7)


def test_stale_tokens_without_the_behaviour_logprobs_say_what_is_missing() -> None:
    x = _inputs(version_lag=torch.ones(2, 4, dtype=torch.long), rollout_logp=None)
    with pytest.raises(ValueError, match="rollout_logp is None"):
        token_policy_loss(x, PPO)


def test_behaviour_weight_cap_must_exceed_one() -> None:
    with pytest.raises(ValueError):
        AlgorithmConfig(behaviour_weight_cap=1.0)


def test_fidelity_compares_current_tokens_and_reports_the_rest_per_lag() -> None:
    r = torch.log(torch.tensor([0.5, 0.25, 0.2, 0.4, 0.1]))
    a = torch.log(torch.tensor([0.5, 0.25, 0.4, 0.2, 0.3]))  # the last three: the policy moved since
    lag = [0, 0, 1, 1, 3]
    m = fidelity_metrics(r, a, ["h"] * 5, lag)
    assert m[PEARSON] == pytest.approx(1.0) and m["rollout_corr/tokens"] == 2.0  # staleness is no infidelity
    assert m[PEARSON + "/h"] == pytest.approx(1.0)
    assert m["training/staleness_mean"] == pytest.approx(1.0) and m["training/staleness_max"] == 3.0
    assert m["rollout_corr/ratio_mean/lag_1"] == pytest.approx((2.0 + 0.5) / 2)
    assert m["rollout_corr/ratio_std/lag_1"] == pytest.approx(0.75)
    assert m["rollout_corr/ratio_std/lag_0"] == 0.0 and m["rollout_corr/tokens/lag_3"] == 1.0
    assert fidelity_metrics(r, a, None, [0] * 5) == {**fidelity_metrics(r, a), **_lag0(r, a)}
    only_stale = fidelity_metrics(r, a, None, [1] * 5)
    assert (
        PEARSON not in only_stale and only_stale["training/staleness_max"] == 1.0
    )  # the gate neither trips nor resets
    with pytest.raises(ValueError, match="newer"):
        fidelity_metrics(r, a, None, [0, 0, 0, 0, -1])


def _lag0(r: torch.Tensor, a: torch.Tensor) -> dict[str, float]:
    w = torch.exp(a.double() - r.double())
    return {
        "training/staleness_mean": 0.0,
        "training/staleness_max": 0.0,
        "rollout_corr/ratio_mean/lag_0": float(w.mean()),
        "rollout_corr/ratio_std/lag_0": float(w.std(unbiased=False)),
        "rollout_corr/tokens/lag_0": 5.0,
    }
