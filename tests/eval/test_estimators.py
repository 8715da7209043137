"""Estimators against hand-computed values and against synthetic data with a known truth."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from lego.eval.estimators import (
    best_of_paired,
    bootstrap_ci,
    mean_pass_at_k,
    paired_bootstrap,
    pass_at_1,
    pass_at_k,
    sign_flip_pvalue,
    task_means,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (3, 2, 2, 1.0),  # n - c < k: some pair always contains a pass
        (6, 0, 3, 0.0),
        (7, 7, 4, 1.0),
        (200, 1, 100, 0.5),  # 1 - C(199,100)/C(200,100) = 1 - 100/200; the product form stays exact
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_formula_and_k1_is_fraction() -> None:
    for n in range(1, 9):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n)
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(2, 3, 1)


def test_pass_at_1_weights_tasks_equally_and_mean_pass_at_k_skips_short_tasks() -> None:
    # task A: 1/2, task B: 3/4 (one task lost samples, still weighs the same) -> (0.5 + 0.75) / 2
    per_task = [[1.0, 0.0], [1.0, 1.0, 1.0, 0.0], []]
    assert pass_at_1(per_task) == pytest.approx(0.625)
    assert task_means(per_task).tolist() == [0.5, 0.75]
    # pass@2: A = 1 - C(1,2)/C(2,2) = 1 ; B = 1 - C(1,2)/C(4,2) = 1 ; pass@3 only B (n=4 >= 3) -> 1
    assert mean_pass_at_k([(2, 1), (4, 3)], 2) == pytest.approx(1.0)
    assert mean_pass_at_k([(2, 0), (4, 1)], 3) == pytest.approx(1 - math.comb(3, 3) / math.comb(4, 3))
    assert math.isnan(pass_at_1([[], []]))


def test_bootstrap_ci_degenerate_cases() -> None:
    assert bootstrap_ci([0.4] * 7, n_boot=200, seed=1) == pytest.approx((0.4, 0.4))
    lo, hi = bootstrap_ci([0.0, 1.0, 0.5, 1.0], n_boot=500, seed=3)
    assert 0.0 <= lo < 0.625 < hi <= 1.0
    assert bootstrap_ci([0.0, 1.0, 0.5, 1.0], n_boot=500, seed=3) == (lo, hi)  # seeded: reproducible


def test_bootstrap_ci_coverage_on_known_rate() -> None:
    """200 synthetic evals of 60 tasks x 2 samples at true pass rate 0.3: the 95% CI covers 0.3 in
    90-99% of them (percentile bootstrap is slightly anti-conservative at this size)."""
    rng = np.random.default_rng(12345)
    true_rate, reps, covered = 0.3, 200, 0
    for r in range(reps):
        outcomes = (rng.random((60, 2)) < true_rate).astype(float)
        lo, hi = bootstrap_ci(outcomes.mean(axis=1), n_boot=500, seed=r)
        covered += lo <= true_rate <= hi
    assert 0.90 <= covered / reps <= 0.99, covered / reps


def test_sign_flip_exact_values() -> None:
    assert sign_flip_pvalue([1.0] * 10) == pytest.approx(2 / 1024)  # only all-plus and all-minus
    assert sign_flip_pvalue([1.0, -1.0, 1.0, -1.0]) == pytest.approx(1.0)
    # |sum of +-1| >= 2 for 1+4+4+1 = 10 of the 16 patterns
    assert sign_flip_pvalue([1.0, 1.0, 1.0, -1.0]) == pytest.approx(10 / 16)


def test_sign_flip_monte_carlo_for_many_tasks() -> None:
    p = sign_flip_pvalue([0.5] * 40, n_perm=2000, seed=0)
    assert p == pytest.approx(1 / 2001)  # no random pattern reaches the all-positive mean


def test_paired_bootstrap_constructed_cases() -> None:
    delta, lo, hi, p = paired_bootstrap([1.0] * 8, [0.0] * 8, n_boot=999, seed=0)
    assert (delta, lo, hi) == pytest.approx((1.0, 1.0, 1.0))
    assert p == pytest.approx(1 / 1000)  # centred differences are all 0: no null draw is as extreme
    same = [0.0, 0.5, 1.0, 0.5, 1.0]
    delta, lo, hi, p = paired_bootstrap(same, same, n_boot=999, seed=0)
    assert delta == 0.0 and p == 1.0 and lo == hi == 0.0
    delta, lo, hi, p = paired_bootstrap([1, 0, 1, 0], [0, 1, 0, 1], n_boot=999, seed=0)
    assert delta == 0.0 and p == 1.0 and lo < 0 < hi


def test_paired_bootstrap_is_calibrated_under_the_null_and_detects_an_effect() -> None:
    rng = np.random.default_rng(7)
    rejections = 0
    for r in range(200):
        a = (rng.random((40, 2)) < 0.4).mean(axis=1)
        b = (rng.random((40, 2)) < 0.4).mean(axis=1)
        rejections += paired_bootstrap(a, b, n_boot=400, seed=r)[3] < 0.05
    assert 0.01 <= rejections / 200 <= 0.12, rejections
    a = (rng.random((40, 2)) < 0.8).mean(axis=1)
    b = (rng.random((40, 2)) < 0.2).mean(axis=1)
    assert paired_bootstrap(a, b, n_boot=400, seed=0)[3] < 0.01
    assert sign_flip_pvalue(a - b, n_perm=400, seed=0) < 0.01


def test_pass_at_k_equals_brute_force_enumeration_of_k_subsets() -> None:
    """pass@k is the chance that k samples drawn without replacement from the n hold a pass: enumerate
    every k-subset of every 0/1 outcome vector up to n = 8 and count."""
    for n in range(1, 9):
        for bits in range(2**n):
            outcomes = [(bits >> i) & 1 for i in range(n)]
            c = sum(outcomes)
            for k in range(1, n + 1):
                subsets = list(combinations(outcomes, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (outcomes, k)


def _simulate(rng: np.random.Generator, means: np.ndarray, n_tasks: int, samples: int) -> np.ndarray:
    """Per-task mean outcomes (n_tasks, n_settings): each task's pass rate is the setting's mean shifted by
    a task difficulty shared across settings, so the settings are correlated as temperatures are."""
    difficulty = rng.random((n_tasks, 1)) - 0.5
    rates = means[None, :] + 0.5 * difficulty
    return (rng.random((n_tasks, means.size, samples)) < rates[:, :, None]).mean(axis=2)


def test_best_of_paired_constructed_cases() -> None:
    rng = np.random.default_rng(0)
    b = rng.random((12, 4))
    assert best_of_paired(b, b.copy(), n_boot=300, seed=0) == (0.0, 0.0, 0.0, 1.0)
    shifted = np.concatenate([rng.random((12, 1)) * 0.01, b[:, :3]], axis=1)  # b's settings moved one column up
    if b.mean(axis=0).argmax() < 3:  # the best column survives the shift: the best-of values are one number
        delta, lo, hi, p = best_of_paired(shifted, b, n_boot=300, seed=0)
        assert delta == 0.0 and lo <= 0.0 <= hi and p > 0.3
    delta, lo, hi, p = best_of_paired(b + 0.2, b, n_boot=300, seed=0)
    assert delta == pytest.approx(0.2) and lo == pytest.approx(0.2) and hi == pytest.approx(0.2)
    assert p == pytest.approx(2 / 2**12)  # exact over 12 tasks: only "swap none" and "swap all" are as extreme
    with pytest.raises(ValueError, match="one shape"):
        best_of_paired(b, b[:, :3])


def test_best_of_paired_is_calibrated_under_the_null_and_its_ci_covers_the_truth() -> None:
    """100 synthetic sweeps of 40 tasks x 4 temperatures x 8 samples: under exchangeable policies the
    permutation test rejects at most ~5% (plus noise), and the re-selecting bootstrap CI covers the true
    best-vs-best difference (of the population means) in >= 88% of them, with and without an effect; a
    +15-point effect is detected in most (power ~0.8 at this size)."""
    rng = np.random.default_rng(1)
    start = np.array([0.4, 0.5, 0.45, 0.3])
    for after, true in ((start, 0.0), (np.array([0.45, 0.55, 0.65, 0.5]), 0.15)):
        covered = rejected = 0
        for r in range(100):
            _, lo, hi, p = best_of_paired(
                _simulate(rng, after, 40, 8), _simulate(rng, start, 40, 8), n_boot=300, seed=r
            )
            covered += lo <= true <= hi
            rejected += p < 0.05
        assert covered >= 88, (true, covered)
        if true == 0.0:
            assert rejected <= 10, rejected
        else:
            assert rejected >= 65, rejected
