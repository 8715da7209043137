"""The baseline a learner's scalar advantage is centred on: advantage = score − baseline.

    baseline = Baseline("batch")                  # serve.learn_baseline
    advantages, subtracted = baseline.advantages([-0.5, -0.5, 0.5])   # [-1/3, -1/3, 2/3], 1/6
    baseline.update([-0.5, -0.5, 0.5])            # after the step trained (the running mean moves)
    state = baseline.state_dict()                 # into the learner checkpoint; load_state_dict on resume

Why a baseline at all: with the judge's score as the advantage, a policy that mostly fails gets only
negative advantages, and a step of only negative advantages pushes down every sampled token -- the
tool call's format included -- until nothing parses (the first `lego bench use` measurement: held-out
15.7% → 0/131 in 9 steps). The policy-gradient estimate stays unbiased for any baseline that does
not depend on the action; subtracting the expected score leaves only how much better or worse a turn
was than usual.

Modes:

- ``batch``: the mean of the step's own scores. Every step's advantages sum to zero, so no step pushes
  everything down (or up); a step whose scores all agree carries no signal and every advantage is
  exactly 0. With ``scale_std`` the centred scores are also divided by their sample standard deviation
  (+ ``eps``), as GRPO does within a group -- see :class:`lego.config.ServeConfig`'s
  ``learn_baseline_std`` for why that is off by default.
- ``running``: an exponential moving average of past steps' mean scores, ``b ← b + rate·(mean − b)``
  after each step; the first step, with no past, is centred on its own mean (and sets ``b``). Its state
  (``value``, ``steps``) is the learner's and lives in its checkpoint, so a resume or rollback gets the
  baseline of that step exactly.
- ``situation``: per turn, the mean score of the *other* recent turns served in the same situation --
  as many user messages in the request (the person's ask, then each re-query) -- trained already or
  not (:attr:`lego.learn.batches.Picked.recent`; leave-one-out, as RLOO). A state-dependent baseline
  that leaves out the turn's own score does not depend on its action, so the estimate stays unbiased;
  a situation in which every recent turn scored alike carries no advantage at all, and a turn alone
  in its situation none either. Measured why (`lego bench use`, seed 3, the balanced pick with
  ``batch``): nearly every thanked turn came from the first ask, so the turns after a re-query were
  pushed down with nothing to push up beside them, and the agent stopped calling tools there (the
  held-out pass@1 fell). No state: it is read from the store each step.
- ``none``: the score itself (the behaviour before baselines; kept for comparison).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["BASELINE_MODES", "Baseline", "BaselineMode"]

BaselineMode = Literal["batch", "running", "situation", "none"]
BASELINE_MODES: tuple[str, ...] = ("batch", "running", "situation", "none")


@dataclass
class Baseline:
    """What a learner subtracts from each turn's score (see the module doc)."""

    mode: str = "batch"
    rate: float = 0.1
    """``running``: the weight of the newest step's mean score in the moving average, in (0, 1]."""
    scale_std: bool = False
    """``batch``: also divide by the batch's sample standard deviation (+ ``eps``)."""
    eps: float = 1e-6
    value: float | None = None
    """``running``: the moving average after the last step (None: no step yet)."""
    steps: int = 0
    """``running``: steps folded into ``value``."""

    def __post_init__(self) -> None:
        if self.mode not in BASELINE_MODES:
            raise ValueError(f"baseline mode {self.mode!r}: one of {', '.join(BASELINE_MODES)}")
        if not 0 < self.rate <= 1:
            raise ValueError(f"baseline rate {self.rate}: in (0, 1]")
        if self.scale_std and self.mode != "batch":
            raise ValueError(f"scaling by the batch's standard deviation is for the batch baseline, not {self.mode!r}")

    def current(self, scores: Sequence[float]) -> float:
        """The baseline a step with ``scores`` subtracts (0 for ``none``)."""
        if self.mode == "none":
            return 0.0
        if self.mode == "running" and self.value is not None:
            return self.value
        return _mean(scores)  # batch, or running before its first step

    def advantages(
        self,
        scores: Sequence[float],
        situations: Sequence[int] | None = None,
        recent: Mapping[int, tuple[float, int]] | None = None,
    ) -> tuple[list[float], float]:
        """Each score minus the baseline (divided by the spread with ``scale_std``), and the baseline (for
        ``situation``, the mean of the turns' own: ``situations`` gives each turn's, ``recent`` each
        situation's score sum and count, the turn's own among them; without another turn there, its own
        score: no advantage)."""
        if self.mode == "situation":
            if situations is None or len(situations) != len(scores):
                raise ValueError("the situation baseline needs each turn's situation")
            pools = recent or {}
            base = []
            for score, key in zip(scores, situations, strict=True):
                total, n = pools.get(key, (float(score), 1))
                base.append((total - score) / (n - 1) if n > 1 else float(score))
            return [float(s) - b for s, b in zip(scores, base, strict=True)], _mean(base)
        if not scores:
            return [], self.current(scores)
        b = self.current(scores)
        if self.mode != "none" and all(s == scores[0] for s in scores) and b == _mean(scores):
            return [0.0] * len(scores), b  # no spread around its own mean: exactly no signal, not rounding noise
        adv = [float(s) - b for s in scores]
        if self.scale_std:
            if len(scores) < 2:
                return [0.0] * len(scores), b
            std = math.sqrt(math.fsum(a * a for a in adv) / (len(adv) - 1))
            adv = [a / (std + self.eps) for a in adv]
        return adv, b

    def update(self, scores: Sequence[float]) -> None:
        """Fold a trained step's scores into the running mean (nothing to do for the other modes)."""
        if self.mode != "running" or not scores:
            return
        m = _mean(scores)
        self.value = m if self.value is None else self.value + self.rate * (m - self.value)
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "value": self.value, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """The state a checkpoint saved; a running mean saved under another mode (or none saved: a
        checkpoint from before baselines) starts afresh."""
        if not state or state.get("mode") != self.mode:
            self.value, self.steps = None, 0
            return
        value = state.get("value")
        self.value = None if value is None else float(value)
        self.steps = int(state.get("steps", 0))


def _mean(scores: Sequence[float]) -> float:
    return math.fsum(scores) / len(scores) if scores else 0.0
