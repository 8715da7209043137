"""What one training step reports: the rollout-side metrics merged with the trainer's, and the
one-line console summary.

``grade/bit_only`` is the share of the FAIL_TO_PASS tests of the step's passing grades that rest on a
pass/fail bit alone (nothing witnessed in the blind copy: :mod:`lego.sandboxes.blind`), and
``grade/unstable_witnesses`` counts the reference witnesses two gold runs disagreed on.

Per-harness metrics (a mixed run, ``harness.weights``) carry the harness as a last path component,
as the trainer's fidelity breakdown does (:mod:`lego.algos.fidelity`)::

    rollout/count/<h>        rollouts of that harness (infrastructure failures included)
    reward/mean/<h>          mean reward over its scored rollouts
    reward/pass_rate/<h>     share of its scored rollouts with reward 1
    training/rollout_actor_probs_pearson_corr/<h>, rollout_corr/kl/<h>, ...   (from the trainer)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from lego.algos.fidelity import PEARSON
from lego.types import INFRA_LABELS, CounterName, Trajectory

__all__ = ["canary_metrics", "step_metrics", "summary_line"]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def step_metrics(trajs: Sequence[Trajectory], train_metrics: dict[str, float]) -> dict[str, float]:
    """Rollout-side metrics of a step (reward, pass rate, labels, guards, lengths; overall and per
    harness) merged with the trainer's."""
    valid = [t for t in trajs if not t.is_infra_failure]
    rewards = [t.reward or 0.0 for t in valid]
    m: dict[str, float] = dict(train_metrics)
    m["rollout/count"] = float(len(trajs))
    m["rollout/infra_failures"] = float(len(trajs) - len(valid))
    m["reward/mean"] = _mean(rewards)
    # the reward, not the grade: a guard may have zeroed a resolved grade
    m["reward/pass_rate"] = sum(1.0 for r in rewards if r >= 1.0) / max(len(valid), 1)
    for label, n in Counter(t.termination for t in trajs).items():
        m[f"termination/{label}"] = float(n)
    # failures the policy caused (a killed harness, a repo that breaks the diff or the grader): scored 0
    m["rollout/policy_failures"] = float(sum(1 for t in valid if t.termination in INFRA_LABELS))
    m["guards/zeroed"] = sum(1.0 for t in trajs if t.metadata.get("zeroed_by")) / max(len(trajs), 1)
    flags = Counter(k for t in trajs for k, v in t.guard_flags.items() if v)
    for name in sorted({k for t in trajs for k in t.guard_flags}):
        m[f"guards/{name}"] = flags[name] / len(trajs)
    # the verdict's evidence: of the FAIL_TO_PASS tests of the step's passing grades, the share that rests on a
    # reported pass/fail bit alone (nothing witnessed in the blind copy, lego.sandboxes.blind)
    graded = [t.grade for t in valid if t.grade is not None and t.grade.resolved]
    judged = sum(g.behavioural + g.bit_only for g in graded)
    m["grade/bit_only"] = sum(g.bit_only for g in graded) / judged if judged else 0.0
    m["grade/unstable_witnesses"] = float(sum(g.unstable for g in graded))
    m["rollout/sampled_tokens_mean"] = _mean([t.num_sampled_tokens for t in valid])
    m["rollout/segments_mean"] = sum(len(t.segments) for t in valid) / max(len(valid), 1)
    m["rollout/turns_mean"] = sum(t.counters.get("turns", 0.0) for t in valid) / max(len(valid), 1)
    # the reasoning-history policy's deviation from one plain segment (proxy.reasoning_history)
    policy_counters: tuple[CounterName, ...] = ("reasoning_seals", "reprefill_tokens", "kept_reasoning_tokens")
    for key in policy_counters:
        m[f"rollout/{key}_mean"] = sum(t.counters.get(key, 0.0) for t in valid) / max(len(valid), 1)
    for h in sorted({t.harness for t in trajs}):
        mine = [t for t in trajs if t.harness == h]
        scored = [t.reward or 0.0 for t in mine if not t.is_infra_failure]
        m[f"rollout/count/{h}"] = float(len(mine))
        if scored:  # a harness whose every rollout failed on infrastructure has no reward to report
            m[f"reward/mean/{h}"] = _mean(scored)
            m[f"reward/pass_rate/{h}"] = sum(1.0 for r in scored if r >= 1.0) / len(scored)
    return m


def canary_metrics(canaries: Sequence[Trajectory]) -> dict[str, float]:
    """``hack/canary_pass_rate``: the share of the step's scored canary rollouts (impossible tasks,
    :mod:`lego.tasks.canary`) that scored 1, which only a hack the grader missed can; and how many ran."""
    scored = [t for t in canaries if not t.is_infra_failure]
    passed = sum(1 for t in scored if (t.reward or 0.0) >= 1.0)
    return {
        "hack/canary_pass_rate": passed / len(scored) if scored else 0.0,
        "hack/canary_rollouts": float(len(scored)),
    }


def _harness_parts(m: dict[str, float]) -> str:
    """`` | <h> r 0.50 pass 50% ρ 1.0000`` per harness, when the step mixed several."""
    names = sorted(k.removeprefix("rollout/count/") for k in m if k.startswith("rollout/count/"))
    if len(names) < 2:
        return ""
    parts = []
    for h in names:
        pearson = m.get(f"{PEARSON}/{h}")
        rho = f" ρ {pearson:.4f}" if pearson is not None else " ρ –"
        parts.append(
            f"{h} r {m.get(f'reward/mean/{h}', float('nan')):.2f} "
            f"pass {100 * m.get(f'reward/pass_rate/{h}', 0.0):.0f}%{rho}"
        )
    return " | " + " · ".join(parts)


def summary_line(step: int, steps: int, m: dict[str, float]) -> str:
    """The one-line step summary on the console (``step`` counts from 0; shown as ``step + 1``)."""
    pearson = m.get(PEARSON, float("nan"))
    return (
        f"step {step + 1}/{steps} | reward {m.get('reward/mean', 0):.3f} | pass {100 * m.get('reward/pass_rate', 0):.0f}% "
        f"| pearson {pearson:.5f} | kl {m.get('rollout_corr/kl', float('nan')):.2e} "
        f"| clip {m.get('actor/pg_clipfrac', 0):.3f} | {m.get('perf/rollout_tokens_per_s', 0):.0f} tok/s "
        f"| infra {m.get('rollout/infra_failures', 0):.0f} | {m.get('perf/step_s', 0):.0f}s"
        + "".join(f" | {k.split('@')[0]} {v:.3f}" for k, v in m.items() if k.startswith("val/pass1@"))
        + (f" | HACK canaries {100 * m['hack/canary_pass_rate']:.0f}%" if m.get("hack/canary_pass_rate") else "")
        + _harness_parts(m)
    )
