import math

import pytest
import torch

from lego.algos import PEARSON, FidelityGate, fidelity_metrics
from lego.errors import FidelityError


def test_identical_logprobs_are_perfect():
    lp = torch.log(torch.rand(100) * 0.9 + 0.05)
    m = fidelity_metrics(lp, lp, ["a"] * 60 + ["b"] * 40)
    assert m[PEARSON] == pytest.approx(1.0)
    assert m["training/rollout_probs_diff_max"] == 0.0
    assert m["rollout_corr/kl"] == 0.0
    assert m["rollout_corr/k3_kl"] == 0.0
    assert m["rollout_corr/chi2_token"] == pytest.approx(0.0, abs=1e-12)
    assert m["rollout_corr/ess_frac"] == pytest.approx(1.0)
    assert m[PEARSON + "/a"] == pytest.approx(1.0)
    assert m["rollout_corr/tokens/b"] == 40.0


def test_values_against_hand_computation():
    r = [math.log(0.5), math.log(0.25)]
    a = [math.log(0.25), math.log(0.25)]
    m = fidelity_metrics(r, a)
    assert m["training/rollout_probs_diff_max"] == pytest.approx(0.25)
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(0.125)
    assert m["rollout_corr/kl"] == pytest.approx(math.log(2) / 2)
    w = [0.5, 1.0]
    assert m["rollout_corr/k3_kl"] == pytest.approx(sum(x - math.log(x) - 1 for x in w) / 2)
    assert m["rollout_corr/chi2_token"] == pytest.approx((0.25 + 1) / 2 - 1)
    assert m["rollout_corr/ess_frac"] == pytest.approx(1.5**2 / (2 * 1.25))


def test_temperature_mismatch_lowers_pearson():
    logits = torch.randn(200, 32) * 3
    ids = torch.randint(0, 32, (200,))
    at = lambda t: torch.log_softmax(logits / t, -1).gather(-1, ids[:, None]).squeeze(-1)  # noqa: E731
    assert fidelity_metrics(at(1.0), at(1.0))[PEARSON] == pytest.approx(1.0)
    assert fidelity_metrics(at(0.3), at(1.0))[PEARSON] < 0.99


def test_gate_trips_after_patience_and_names_metric():
    gate = FidelityGate(min_pearson=0.99, patience=2)
    gate.observe({PEARSON: 0.5})
    gate.observe({PEARSON: 0.999})  # resets
    gate.observe({})  # no tokens: neither trips nor resets
    gate.observe({PEARSON: 0.7})
    with pytest.raises(FidelityError, match=r"rollout_actor_probs_pearson_corr = 0\.600000.*0\.99"):
        gate.observe({PEARSON: 0.6})
    assert gate.state_dict() == {"consecutive": 2}
