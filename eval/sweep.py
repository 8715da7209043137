"""Two policies compared fairly over a sampling-temperature sweep: each at its own best temperature.

A policy's pass@1 depends on the temperature it is sampled at, and RL that only sharpens a policy
does what a lower temperature does. Comparing a trained policy with its start at one shared
temperature therefore credits RL with what a temperature knob buys. The fair figure is
**best-vs-best**: each policy sampled at every temperature of a sweep, on the same tasks with the
same per-sample seeds, and each scored at the temperature where its pass@1 is highest.

Input: per policy an outcome grid ``(n_tasks, n_temperatures, n_samples)`` of 0/1 outcomes, NaN where a
sample is missing or was an infrastructure failure (never scored 0). Tasks are the unit of
resampling (:mod:`lego.eval.estimators`); only tasks with a scored sample in every temperature of
both policies are compared, so every figure here is paired.

What :func:`compare_sweeps` reports:

- per temperature and policy: pass@1 with a 95% bootstrap CI over tasks;
- best-vs-best: the difference of the two best pass@1 values, with a paired bootstrap CI that re-picks
  both best temperatures in every resample and a paired permutation p-value that re-picks them in
  every permutation (:func:`lego.eval.estimators.best_of_paired`); next to it the plain paired
  bootstrap at the two chosen temperatures (conditional on the choice), and a **selection-free**
  estimate: temperatures chosen on the even-numbered samples of each task, pass@1 scored on the
  odd-numbered ones;
- same-temperature deltas: paired bootstrap CI, bootstrap and sign-flip p-values at each temperature;
- unbiased pass@k (Chen et al. 2021) before and after, each policy at its best temperature (on the
  confirm stage's samples when there is one), with bootstrap CIs and the paired difference.

With a **confirm stage** (:class:`ConfirmGrids`; ``lego bench learn``'s default) each policy's best
temperature is chosen on its sweep and then fresh samples (new per-sample seeds) are drawn there:
best-vs-best is then also scored on those (:class:`Confirmed`: no selection bias, and a paired CI and
p-value that need no re-picking), and pass@k comes from them, so only the chosen temperature pays for
the many samples pass@k needs.

The caveat, stated in every report: picking the best of several temperatures on the data that
scores it biases each best-of value upward, about equally for two policies of similar noise; the
split estimate has no such bias (at half the samples), and the CI of best-vs-best includes the
selection's variability.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from lego.eval.estimators import best_of_paired, bootstrap_ci, paired_bootstrap, pass_at_k, sign_flip_pvalue

__all__ = [
    "SELECTION_CAVEAT",
    "BestVsBest",
    "ConfirmGrids",
    "Confirmed",
    "FairComparison",
    "PairedDelta",
    "PassAtKRow",
    "SplitHalf",
    "SweepPoint",
    "compare_sweeps",
    "task_pass_at_k",
]

SELECTION_CAVEAT = (
    "Each policy's best temperature is chosen on the same samples that score it, which biases both best-of "
    "pass@1 values upward (by about the noise among near-tied temperatures), alike for two policies of similar "
    "noise. The best-vs-best CI and p-value re-choose the temperatures in every resample; 'split' chooses them on "
    "the even-numbered samples and scores the odd-numbered ones (no selection bias, half the samples)."
)

Interval = tuple[float, float]


class SweepPoint(BaseModel):
    """One policy at one temperature, over the compared tasks."""

    model_config = ConfigDict(extra="forbid")

    temperature: float
    pass1: float
    ci95: Interval
    n_tasks: int
    n_scored: int = Field(description="Scored (non-infrastructure) samples over the compared tasks.")


class PairedDelta(BaseModel):
    """after - before, paired over tasks."""

    model_config = ConfigDict(extra="forbid")

    before: float
    after: float
    delta: float
    ci95: Interval = Field(description="Paired percentile bootstrap over tasks.")
    p_value: float = Field(description="Two-sided paired bootstrap p-value (centred differences).")
    p_value_sign_flip: float = Field(description="Two-sided paired sign-flip permutation p-value.")
    n_tasks: int


class SameTemperature(PairedDelta):
    """Both policies at one temperature."""

    temperature: float


class SplitHalf(BaseModel):
    """Best-vs-best without selection bias: temperatures chosen on even samples, scored on odd ones."""

    model_config = ConfigDict(extra="forbid")

    before_temperature: float
    after_temperature: float
    scored: PairedDelta = Field(description="pass@1 on the odd-numbered samples at the temperatures chosen.")


class BestVsBest(BaseModel):
    """Each policy at the temperature where its pass@1 is highest."""

    model_config = ConfigDict(extra="forbid")

    before_temperature: float
    after_temperature: float
    before: float
    after: float
    delta: float
    ci95: Interval = Field(description="Paired bootstrap over tasks, best temperatures re-chosen per resample.")
    p_value: float = Field(description="Two-sided paired permutation p-value, best temperatures re-chosen.")
    n_tasks: int
    at_chosen: PairedDelta = Field(description="Plain paired comparison at the two chosen temperatures.")
    split: SplitHalf | None = Field(None, description="None with fewer than 2 samples per task.")
    caveat: str = SELECTION_CAVEAT


class Confirmed(BaseModel):
    """Best-vs-best on fresh samples: each policy's temperature chosen on its sweep, then ``samples`` new
    samples per task (new seeds) drawn there and scored. No selection bias: the choice never saw them."""

    model_config = ConfigDict(extra="forbid")

    before_temperature: float
    after_temperature: float
    samples: int
    before_ci95: Interval
    after_ci95: Interval
    scored: PairedDelta = Field(description="pass@1 on the fresh samples, paired over tasks.")


@dataclass(frozen=True)
class ConfirmGrids:
    """The confirm stage's outcomes: (n_tasks, n_samples) 0/1 per policy at its chosen temperature (NaN:
    unscored), the tasks in the order of the sweep grids."""

    before_temperature: float
    after_temperature: float
    before: np.ndarray
    after: np.ndarray


class PassAtKRow(BaseModel):
    """Unbiased pass@k of both policies, each at its best temperature."""

    model_config = ConfigDict(extra="forbid")

    k: int
    before: float
    before_ci95: Interval
    after: float
    after_ci95: Interval
    delta: float
    delta_ci95: Interval
    p_value: float
    n_tasks: int


class FairComparison(BaseModel):
    """Everything :func:`compare_sweeps` computes (all of it goes into the bench JSON)."""

    model_config = ConfigDict(extra="forbid")

    temperatures: list[float]
    samples: int
    n_tasks: int = Field(description="Tasks compared: a scored sample at every temperature of both policies.")
    n_tasks_dropped: int
    before: list[SweepPoint]
    after: list[SweepPoint]
    best_vs_best: BestVsBest
    confirmed: Confirmed | None = Field(None, description="Best-vs-best on the confirm stage's fresh samples.")
    same_temperature: list[SameTemperature]
    pass_at_k: list[PassAtKRow]
    pass_at_k_from: Literal["confirm", "sweep"] = Field(
        description="Whose samples pass@k is computed on: 'confirm' (the fresh samples at each chosen "
        "temperature) or 'sweep' (the sweep's samples at each best temperature)."
    )


def task_pass_at_k(outcomes: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k of each task (row) from its 0/1 outcomes; NaN entries are unscored samples and a
    task with fewer than ``k`` scored samples gets NaN. ``outcomes``: (n_tasks, n_samples)."""
    out = np.full(outcomes.shape[0], np.nan)
    for i, row in enumerate(outcomes):
        scored = row[~np.isnan(row)]
        if scored.size >= k:
            out[i] = pass_at_k(int(scored.size), int(scored.sum()), k)
    return out


def _paired(before: np.ndarray, after: np.ndarray, n_boot: int, seed: int) -> PairedDelta:
    """after - before over the tasks where both are defined."""
    ok = ~(np.isnan(before) | np.isnan(after))
    b, a = before[ok], after[ok]
    delta, lo, hi, p = paired_bootstrap(a, b, n_boot=n_boot, seed=seed)
    return PairedDelta(
        before=float(b.mean()) if b.size else float("nan"),
        after=float(a.mean()) if a.size else float("nan"),
        delta=delta,
        ci95=(lo, hi),
        p_value=p,
        p_value_sign_flip=sign_flip_pvalue(a - b, n_perm=n_boot, seed=seed),
        n_tasks=int(ok.sum()),
    )


def _points(means: np.ndarray, grid: np.ndarray, temperatures: list[float], n_boot: int, seed: int) -> list[SweepPoint]:
    return [
        SweepPoint(
            temperature=t,
            pass1=float(means[:, j].mean()),
            ci95=bootstrap_ci(means[:, j], n_boot=n_boot, seed=seed + j),
            n_tasks=means.shape[0],
            n_scored=int((~np.isnan(grid[:, j])).sum()),
        )
        for j, t in enumerate(temperatures)
    ]


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    """nanmean where an all-NaN slice is NaN without a warning (a task with no scored sample in one half)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.asarray(np.nanmean(x, axis=axis))


def _split(before: np.ndarray, after: np.ndarray, temperatures: list[float], n_boot: int, seed: int) -> SplitHalf:
    """Choose each policy's temperature on samples 0, 2, 4, ...; score samples 1, 3, 5, ... there."""
    pick_b = int(np.nanargmax(_nanmean(_nanmean(before[:, :, 0::2], axis=2), axis=0)))
    pick_a = int(np.nanargmax(_nanmean(_nanmean(after[:, :, 0::2], axis=2), axis=0)))
    return SplitHalf(
        before_temperature=temperatures[pick_b],
        after_temperature=temperatures[pick_a],
        scored=_paired(
            _nanmean(before[:, pick_b, 1::2], axis=1), _nanmean(after[:, pick_a, 1::2], axis=1), n_boot, seed
        ),
    )


def compare_sweeps(
    before: np.ndarray,
    after: np.ndarray,
    temperatures: list[float],
    ks: list[int],
    n_boot: int = 2000,
    seed: int = 0,
    confirm: ConfirmGrids | None = None,
) -> FairComparison:
    """The fair comparison of ``after`` against ``before`` (see the module doc).

    ``before`` and ``after``: (n_tasks, n_temperatures, n_samples) outcome grids over the same tasks,
    temperatures and per-sample seeds, NaN for unscored samples. ``confirm``: the confirm stage's fresh
    samples at each policy's chosen temperature (then pass@k is computed on them). ``ks``: the k of
    pass@k, each at most the number of samples it is computed on."""
    if before.shape != after.shape or before.ndim != 3 or before.shape[1] != len(temperatures):
        raise ValueError(
            f"need two (n_tasks, {len(temperatures)} temperatures, n_samples) grids of one shape, "
            f"got {before.shape} and {after.shape}"
        )
    n_samples = before.shape[2]
    if confirm is not None and (
        confirm.before.shape != confirm.after.shape or confirm.before.shape[0] != before.shape[0]
    ):
        raise ValueError(
            f"the confirm grids must be (n_tasks={before.shape[0]}, n_samples) each, got "
            f"{confirm.before.shape} and {confirm.after.shape}"
        )
    n_k = confirm.before.shape[1] if confirm is not None else n_samples
    if ks and max(ks) > n_k:
        raise ValueError(f"pass@{max(ks)} needs at least {max(ks)} samples per task, the grids hold {n_k}")
    scored = (~np.isnan(before)).any(axis=2).all(axis=1) & (~np.isnan(after)).any(axis=2).all(axis=1)
    b_grid, a_grid = before[scored], after[scored]
    b_means, a_means = _nanmean(b_grid, axis=2), _nanmean(a_grid, axis=2)  # (n_tasks, n_temperatures)
    delta, lo, hi, p = best_of_paired(a_means, b_means, n_boot=n_boot, seed=seed)
    jb, ja = int(np.argmax(b_means.mean(axis=0))), int(np.argmax(a_means.mean(axis=0)))
    best = BestVsBest(
        before_temperature=temperatures[jb],
        after_temperature=temperatures[ja],
        before=float(b_means[:, jb].mean()),
        after=float(a_means[:, ja].mean()),
        delta=delta,
        ci95=(lo, hi),
        p_value=p,
        n_tasks=int(scored.sum()),
        at_chosen=_paired(b_means[:, jb], a_means[:, ja], n_boot, seed + 1),
        split=_split(b_grid, a_grid, temperatures, n_boot, seed + 2) if n_samples >= 2 else None,
    )
    same = [
        SameTemperature(temperature=t, **_paired(b_means[:, j], a_means[:, j], n_boot, seed + 10 + j).model_dump())
        for j, t in enumerate(temperatures)
    ]
    confirmed = None
    k_before, k_after = b_grid[:, jb], a_grid[:, ja]
    if confirm is not None:
        cb, ca = confirm.before[scored], confirm.after[scored]
        k_before, k_after = cb, ca
        pb1, pa1 = _nanmean(cb, axis=1), _nanmean(ca, axis=1)
        confirmed = Confirmed(
            before_temperature=confirm.before_temperature,
            after_temperature=confirm.after_temperature,
            samples=cb.shape[1],
            before_ci95=bootstrap_ci(pb1[~np.isnan(pb1)], n_boot=n_boot, seed=seed + 3),
            after_ci95=bootstrap_ci(pa1[~np.isnan(pa1)], n_boot=n_boot, seed=seed + 4),
            scored=_paired(pb1, pa1, n_boot, seed + 5),
        )
    rows = []
    for k in ks:
        pb, pa = task_pass_at_k(k_before, k), task_pass_at_k(k_after, k)
        d = _paired(pb, pa, n_boot, seed + 100 + k)
        rows.append(
            PassAtKRow(
                k=k,
                before=float(_nanmean(pb, axis=0)),
                before_ci95=bootstrap_ci(pb[~np.isnan(pb)], n_boot=n_boot, seed=seed + 200 + k),
                after=float(_nanmean(pa, axis=0)),
                after_ci95=bootstrap_ci(pa[~np.isnan(pa)], n_boot=n_boot, seed=seed + 300 + k),
                delta=d.delta,
                delta_ci95=d.ci95,
                p_value=d.p_value,
                n_tasks=d.n_tasks,
            )
        )
    return FairComparison(
        temperatures=list(temperatures),
        samples=n_samples,
        n_tasks=int(scored.sum()),
        n_tasks_dropped=int((~scored).sum()),
        before=_points(b_means, b_grid, temperatures, n_boot, seed + 1000),
        after=_points(a_means, a_grid, temperatures, n_boot, seed + 2000),
        best_vs_best=best,
        confirmed=confirmed,
        same_temperature=same,
        pass_at_k=rows,
        pass_at_k_from="confirm" if confirm is not None else "sweep",
    )
