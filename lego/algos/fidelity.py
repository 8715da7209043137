"""Rollout–train fidelity: does the trainer see the probabilities the engine sampled under?

Computed every step over the mask-1 (sampled) tokens flattened across the batch, with verl's names.
With r = log π_rollout (what the engine recorded) and a = log π_old (the trainer's recompute on the
same ids at the same temperature), and w = exp(a − r) the per-token importance weight:

    training/rollout_actor_probs_pearson_corr   Pearson(exp r, exp a)
    training/rollout_probs_diff_{max,mean,std}  |exp r − exp a|
    rollout_corr/kl                             mean(r − a)               k1 estimate of KL(π_rollout‖π_old)
    rollout_corr/k3_kl                          mean(w − log w − 1)       k3 estimate (Schulman 2020)
    rollout_corr/chi2_token                     mean(w²) − 1              χ²(π_old‖π_rollout) per token
    rollout_corr/ess_frac                       (Σw)² / (n Σw²)           effective sample size / n
    rollout_corr/tokens                         n

Per-harness breakdown: the same names with ``/<harness>`` appended (e.g.
``training/rollout_actor_probs_pearson_corr/lego-agent``), computed over that harness's tokens only.

Staleness (asynchronous training: a token may have been sampled by an older policy version). Each
token is compared with the version that sampled it, and the trainer holds only π_old's weights, so
the metrics above -- and the gate -- are computed over the tokens π_old's own version sampled (lag
0). A stale token's gap to π_old is the policy having moved, not the engine being wrong; it is
reported apart, per version lag L (how many versions before π_old's the token was drawn), with
w = exp(a − r) = π_old/π_rollout:

    training/staleness_mean, training/staleness_max   L over all sampled tokens
    rollout_corr/ratio_mean/lag_L                     mean(w) over the tokens of lag L
    rollout_corr/ratio_std/lag_L                      std(w): the ratio's spread at that lag
    rollout_corr/tokens/lag_L                         how many (the staleness histogram)

The reference result for harness training reports Pearson > 0.99; :class:`FidelityGate` stops a
run that stays under ``fidelity.min_pearson`` for ``fidelity.patience`` steps in a row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lego.errors import FidelityError

__all__ = ["PEARSON", "FidelityGate", "fidelity_metrics"]

PEARSON = "training/rollout_actor_probs_pearson_corr"


def _pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation; when either side is constant it is undefined, and we report 1.0 if the
    two agree to 1e-6 everywhere (a perfect match) and 0.0 otherwise."""
    xc, yc = x - x.mean(), y - y.mean()
    den = torch.sqrt((xc * xc).sum() * (yc * yc).sum())
    if float(den) <= 1e-30:
        return 1.0 if float((x - y).abs().max()) < 1e-6 else 0.0
    return float(((xc * yc).sum() / den).clamp(-1.0, 1.0))


def _one(r: torch.Tensor, a: torch.Tensor, suffix: str) -> dict[str, float]:
    pr, pa = torch.exp(r), torch.exp(a)
    diff = (pr - pa).abs()
    log_w = (a - r).clamp(-20.0, 20.0)
    w = torch.exp(log_w)
    n = r.numel()
    return {
        PEARSON + suffix: _pearson(pr, pa),
        "training/rollout_probs_diff_max" + suffix: float(diff.max()),
        "training/rollout_probs_diff_mean" + suffix: float(diff.mean()),
        "training/rollout_probs_diff_std" + suffix: float(diff.std(unbiased=False)),
        "rollout_corr/kl" + suffix: float((r - a).mean()),
        "rollout_corr/k3_kl" + suffix: float((w - log_w - 1.0).mean()),
        "rollout_corr/chi2_token" + suffix: float((w * w).mean() - 1.0),
        "rollout_corr/ess_frac" + suffix: float(w.sum() ** 2 / (n * (w * w).sum())),
        "rollout_corr/tokens" + suffix: float(n),
    }


def _by_lag(r: torch.Tensor, a: torch.Tensor, lag: torch.Tensor) -> dict[str, float]:
    out = {"training/staleness_mean": float(lag.double().mean()), "training/staleness_max": float(lag.max())}
    for value in sorted(set(lag.tolist())):
        sel = lag == value
        w = torch.exp((a[sel] - r[sel]).clamp(-20.0, 20.0))
        out[f"rollout_corr/ratio_mean/lag_{value}"] = float(w.mean())
        out[f"rollout_corr/ratio_std/lag_{value}"] = float(w.std(unbiased=False))
        out[f"rollout_corr/tokens/lag_{value}"] = float(w.numel())
    return out


def fidelity_metrics(
    rollout_logp: Sequence[float] | torch.Tensor,
    actor_logp: Sequence[float] | torch.Tensor,
    harness: Sequence[str] | None = None,
    version_lag: Sequence[int] | torch.Tensor | None = None,
) -> dict[str, float]:
    """Fidelity metrics over flat, aligned lists of sampled-token logprobs (see module docstring).

    ``harness[i]`` names the harness that produced token i; each distinct harness gets its own
    ``/<harness>`` copy of every metric. ``version_lag[i]``: how many versions before π_old's token i
    was sampled; with it, the fidelity metrics cover the lag-0 tokens and the staleness metrics are
    added (a batch without a lag-0 token then has no Pearson: the gate neither trips nor resets).
    Empty input gives an empty dict (nothing was sampled).
    """
    r = torch.as_tensor(rollout_logp, dtype=torch.float64).flatten()
    a = torch.as_tensor(actor_logp, dtype=torch.float64).flatten()
    if r.shape != a.shape:
        raise ValueError(f"{r.numel()} rollout logprobs but {a.numel()} recomputed ones")
    if r.numel() == 0:
        return {}
    if harness is not None and len(harness) != r.numel():
        raise ValueError(f"{len(harness)} harness labels for {r.numel()} tokens")
    out: dict[str, float] = {}
    if version_lag is not None:
        lag = torch.as_tensor(version_lag, dtype=torch.long).flatten()
        if lag.numel() != r.numel():
            raise ValueError(f"{lag.numel()} version lags for {r.numel()} tokens")
        if bool((lag < 0).any()):
            raise ValueError("a version lag is negative: a token was sampled by a version newer than π_old's")
        out.update(_by_lag(r, a, lag))
        current = lag == 0
        if not bool(current.all()):
            r, a = r[current], a[current]
            harness = None if harness is None else [h for h, c in zip(harness, current.tolist(), strict=True) if c]
            if r.numel() == 0:
                return out
    out.update(_one(r, a, ""))
    if harness is not None:
        for name in sorted(set(harness)):
            sel = torch.tensor([h == name for h in harness])
            out.update(_one(r[sel], a[sel], f"/{name}"))
    return out


class FidelityGate:
    """Stops a run whose rollout–train Pearson stays under ``min_pearson`` for ``patience`` steps.

    Call :meth:`observe` with each step's metrics before applying the update; it raises
    :class:`FidelityError` naming the metric, its value and the threshold. A step with no sampled
    tokens (no Pearson) neither trips nor resets the count.
    """

    def __init__(self, min_pearson: float = 0.99, patience: int = 2, metric: str = PEARSON) -> None:
        if patience < 1:
            raise ValueError("patience must be >= 1")
        self.min_pearson = min_pearson
        self.patience = patience
        self.metric = metric
        self.consecutive = 0

    def observe(self, metrics: dict[str, float]) -> None:
        value = metrics.get(self.metric)
        if value is None:
            return
        if value < self.min_pearson:
            self.consecutive += 1
        else:
            self.consecutive = 0
        if self.consecutive >= self.patience:
            raise FidelityError(
                f"{self.metric} = {value:.6f} stayed below the threshold fidelity.min_pearson = "
                f"{self.min_pearson} for {self.consecutive} consecutive steps (patience {self.patience}): the "
                "trainer is not recomputing the probabilities the engine sampled under. Check that the engine "
                "samples at algorithm.temperature, that the trainer and engine load the same weights (weight sync), "
                "and that the recorded token ids are the sampled ones"
            )

    def state_dict(self) -> dict[str, int]:
        return {"consecutive": self.consecutive}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.consecutive = int(state.get("consecutive", 0))
