"""Estimators for evaluation: pass@1 with a bootstrap confidence interval, unbiased pass@k, and
paired tests for the difference between two policies on the same tasks.

Everything here is a pure function of numpy arrays (and a seed), so a report can be recomputed
from the per-sample JSON and gives the same numbers every time.

The unit of resampling is the *task*, not the sample: samples of one task are correlated (same
repository, same difficulty), so resampling samples would understate the uncertainty. The
confidence interval and the p-values therefore answer "how much would this number move on another
draw of tasks from the same distribution".
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import numpy as np

__all__ = [
    "best_of_paired",
    "bootstrap_ci",
    "mean_pass_at_k",
    "paired_bootstrap",
    "pass_at_1",
    "pass_at_k",
    "sign_flip_pvalue",
    "task_means",
]

EXACT_SIGN_FLIP_MAX_TASKS = 16
"""Up to this many tasks the sign-flip test enumerates all 2**n sign patterns (exact p-value)."""


def task_means(per_task: Sequence[Sequence[float]]) -> np.ndarray:
    """Mean score of each task over its samples; tasks with no scored sample are dropped."""
    return np.array([float(np.mean(s)) for s in per_task if len(s) > 0], dtype=np.float64)


def pass_at_1(per_task: Sequence[Sequence[float]]) -> float:
    """pass@1 = mean over tasks of (mean over that task's samples of the 0/1 outcome).

    Averaging per task first weights every task equally even when some tasks lost samples to
    infrastructure failures. Returns NaN when no task has a scored sample.
    """
    means = task_means(per_task)
    return float(means.mean()) if means.size else float("nan")


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values`` (one value per task).

    Resamples tasks with replacement ``n_boot`` times (Efron & Tibshirani 1993, ch. 13). With a
    single task, or all tasks equal, the interval collapses to the point estimate, which is the
    honest answer: the data show no spread to resample.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    boot = x[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with ``n`` samples of which ``c`` passed (Chen et al. 2021).

    pass@k = 1 - C(n-c, k) / C(n, k), computed as the product 1 - prod_{i=n-c+1}^{n} (1 - k/i),
    which never forms the (huge) binomial coefficients.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean pass@k over tasks given ``(n, c)`` per task; tasks with fewer than ``k`` scored samples
    are left out (their pass@k is undefined). NaN when no task qualifies."""
    vals = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return float(np.mean(vals)) if vals else float("nan")


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float, float]:
    """Paired bootstrap over tasks for delta = mean(a - b), ``a[i]`` and ``b[i]`` being the same task.

    Returns ``(delta, ci_low, ci_high, p_value)``. The CI is the percentile interval of the resampled
    mean difference. The two-sided p-value resamples the *centred* differences (d - mean d), i.e.
    draws from a null with the observed spread but no effect, and counts how often the null mean is at
    least as far from 0 as the observed one: p = (1 + #{|d*| >= |delta|}) / (1 + n_boot)
    (Efron & Tibshirani 1993, §16.4; the +1 keeps p > 0 for a finite number of resamples).
    """
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size == 0:
        nan = float("nan")
        return nan, nan, nan, nan
    delta = float(d.mean())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    boot = d[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    null = (d - delta)[idx].mean(axis=1)
    extreme = int(np.sum(np.abs(null) >= abs(delta) - 1e-12))
    return delta, float(lo), float(hi), (1 + extreme) / (1 + n_boot)


def sign_flip_pvalue(d: Sequence[float] | np.ndarray, n_perm: int = 10000, seed: int = 0) -> float:
    """Two-sided paired permutation (sign-flip) test of mean(d) = 0, ``d`` the per-task differences.

    Under the null each task's difference is as likely to have the opposite sign. With at most
    :data:`EXACT_SIGN_FLIP_MAX_TASKS` tasks all 2**n sign patterns are enumerated (exact p-value);
    beyond that ``n_perm`` random patterns are drawn and p = (1 + #extreme) / (1 + n_perm).
    """
    x = np.asarray(d, dtype=np.float64)
    if x.size == 0:
        return float("nan")
    obs = abs(float(x.mean()))
    if x.size <= EXACT_SIGN_FLIP_MAX_TASKS:
        signs = np.array(list(product((1.0, -1.0), repeat=x.size)))
        means = np.abs((signs * x).mean(axis=1))
        return float(np.mean(means >= obs - 1e-12))
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([1.0, -1.0]), size=(n_perm, x.size))
    extreme = int(np.sum(np.abs((signs * x).mean(axis=1)) >= obs - 1e-12))
    return (1 + extreme) / (1 + n_perm)


def _sign_patterns(n: int, n_perm: int, seed: int) -> np.ndarray:
    """Sign patterns (rows of +-1) for a paired permutation test over ``n`` tasks: all 2**n of them up
    to :data:`EXACT_SIGN_FLIP_MAX_TASKS` tasks, else ``n_perm`` random ones."""
    if n <= EXACT_SIGN_FLIP_MAX_TASKS:
        return np.array(list(product((1.0, -1.0), repeat=n)))
    return np.random.default_rng(seed).choice(np.array([1.0, -1.0]), size=(n_perm, n))


def best_of_paired(
    a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float, float]:
    """Best-vs-best over a sweep: delta = max_j mean_i a[i, j] - max_j mean_i b[i, j].

    ``a`` and ``b`` are (n_tasks, n_settings) per-task scores of two policies on the same tasks, one
    column per setting (a sampling temperature); each policy is scored at its own best setting.
    Returns ``(delta, ci_low, ci_high, p_value)``.

    The choice of the best setting is part of the statistic, so both the interval and the test redo
    it on every resample:

    - CI: paired percentile bootstrap over tasks (the same task indices for ``a`` and ``b``), each
      policy's best column re-chosen in every resample, so the interval carries the uncertainty of
      which setting is best as well as of the tasks;
    - p-value: two-sided paired permutation test of "the two policies are exchangeable" (each task's
      whole row of ``a`` swapped with its row of ``b`` with probability 1/2, best columns re-chosen),
      exact over all 2**n swaps up to :data:`EXACT_SIGN_FLIP_MAX_TASKS` tasks, else ``n_boot`` random
      ones with p = (1 + #extreme) / (1 + n_boot).

    Taking the max over settings on the same data biases each best-of value upward (by about the
    noise of the settings that nearly tie); the bias is alike for two policies of similar noise and
    cancels in the delta only to that extent. A selection-free estimate chooses the settings on one
    half of the samples and scores on the other (see :mod:`lego.eval.sweep`).
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"need two (n_tasks, n_settings) arrays of one shape, got {x.shape} and {y.shape}")
    if x.shape[0] == 0:
        nan = float("nan")
        return nan, nan, nan, nan
    delta = float(x.mean(axis=0).max() - y.mean(axis=0).max())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))  # (n_boot, n_tasks)
    boot = x[idx].mean(axis=1).max(axis=1) - y[idx].mean(axis=1).max(axis=1)  # (n_boot,)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    signs = _sign_patterns(x.shape[0], n_boot, seed)  # (n_perm, n_tasks): +1 keeps a task's rows, -1 swaps them
    keep = (signs > 0)[:, :, None]  # (n_perm, n_tasks, 1)
    perm_a = np.where(keep, x[None], y[None]).mean(axis=1).max(axis=1)
    perm_b = np.where(keep, y[None], x[None]).mean(axis=1).max(axis=1)
    extreme = np.abs(perm_a - perm_b) >= abs(delta) - 1e-12
    p = float(extreme.mean()) if x.shape[0] <= EXACT_SIGN_FLIP_MAX_TASKS else (1 + int(extreme.sum())) / (1 + n_boot)
    return delta, float(lo), float(hi), p
