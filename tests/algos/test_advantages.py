import math

import pytest

from lego.algos import group_advantages


def test_group_normalised_within_each_group():
    adv = group_advantages([1.0, 0.0, 1.0, 0.0, 5.0, 1.0], ["a", "a", "a", "a", "b", "b"])
    # group a: mean 0.5, unbiased std sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert adv[:4] == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6)] * 2)
    assert sum(adv[:4]) == pytest.approx(0.0, abs=1e-12)
    assert adv[4] > 0 > adv[5]


def test_zero_spread_group_is_exactly_zero():
    adv = group_advantages([0.1, 0.1, 0.1, 1.0, 0.0], ["a", "a", "a", "b", "b"])
    assert adv[:3] == [0.0, 0.0, 0.0]
    assert adv[3] != 0.0


def test_infra_failures_excluded_from_stats():
    with_fail = group_advantages([1.0, 0.0, 0.0, 0.0], ["t"] * 4, valid=[True, True, True, False])
    without = group_advantages([1.0, 0.0, 0.0], ["t"] * 3)
    assert with_fail[:3] == pytest.approx(without)
    assert with_fail[3] == 0.0
    # one valid member left: no spread, all zero
    assert group_advantages([1.0, 0.0], ["t", "t"], valid=[True, False]) == [0.0, 0.0]


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="group keys"):
        group_advantages([1.0], ["a", "b"])
