"""From per-sample results to the matrices: one :class:`CellSummary` per policy x harness, each
trained policy's delta against its base per harness, and the transfer matrix (trained-in x
evaluated-in).

Which policy is whose base: a :class:`PolicySpec` names it in ``base`` (the CLI's ``--base
TRAINED=BASE``). Without that, when a policy is literally named ``base``, every policy whose
checkpoint records a ``trained_harness`` is compared against it. The reserved ``oracle`` policy is
never given a base.

A policy's training harness comes from its checkpoint's ``lego_meta.json``: one name, or for a
mixed-harness run the weighted harnesses joined by ``+`` (``lego-agent+mini-swe-agent``); every one
of them is in-distribution in the transfer matrix (:func:`trained_in`).

Infrastructure failures are counted per cell (``n_infra``, ``infra_rate``) and left out of every
score: a sample the harness or sandbox lost says nothing about the policy.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable

import numpy as np

from lego.eval.estimators import bootstrap_ci, mean_pass_at_k, paired_bootstrap, sign_flip_pvalue
from lego.eval.results import (
    CellSummary,
    DeltaSummary,
    EvalResults,
    EvalSpec,
    PolicySpec,
    SampleResult,
    TransferRow,
)
from lego.types import INFRA_LABELS

__all__ = ["assign_bases", "cell_metrics", "summarize", "summarize_cell", "trained_in"]


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else float("nan")


def _cell_seed(base_seed: int, *names: str) -> int:
    """A bootstrap seed per cell that does not depend on which other cells exist."""
    digest = hashlib.sha256("\x00".join([str(base_seed), *names]).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _per_task(samples: Iterable[SampleResult]) -> dict[str, list[float]]:
    """Task id -> the 0/1 outcomes of its scored samples, in sample order."""
    out: dict[str, list[float]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: (s.key.task_id, s.key.sample)):
        if not s.infra:
            out[s.key.task_id].append(1.0 if s.passed else 0.0)
    return dict(out)


def _ending(s: SampleResult) -> str:
    """The termination label, with its cause where the label alone does not say who failed
    (``harness_error (policy)``: the agent killed its harness, scored 0; ``(infrastructure)``: excluded)."""
    return f"{s.termination} ({s.cause})" if s.termination in INFRA_LABELS else s.termination


def summarize_cell(policy: str, harness: str, samples: list[SampleResult], n_boot: int, seed: int) -> CellSummary:
    """pass@1 with a 95% bootstrap CI over tasks, pass@k for k = 1..N, and the cell's counters."""
    scored = [s for s in samples if not s.infra]
    per_task = _per_task(samples)
    means = np.array([np.mean(v) for v in per_task.values()], dtype=np.float64)
    pass1 = float(means.mean()) if means.size else float("nan")
    lo, hi = bootstrap_ci(means, n_boot=n_boot, seed=_cell_seed(seed, policy, harness))
    max_n = max((len(v) for v in per_task.values()), default=0)
    counts = [(len(v), int(sum(v))) for v in per_task.values()]
    flags: Counter[str] = Counter()
    for s in samples:
        flags.update(name for name, raised in s.guard_flags.items() if raised)
    return CellSummary(
        policy=policy,
        harness=harness,
        n_tasks=len(per_task),
        n_samples=len(samples),
        n_scored=len(scored),
        n_infra=len(samples) - len(scored),
        infra_rate=(len(samples) - len(scored)) / len(samples) if samples else 0.0,
        pass1=pass1,
        ci_low=lo,
        ci_high=hi,
        pass_at_k={k: mean_pass_at_k(counts, k) for k in range(1, max_n + 1)},
        mean_turns=_mean([s.turns for s in scored]),
        mean_prompt_tokens=_mean([s.prompt_tokens for s in scored]),
        mean_completion_tokens=_mean([s.completion_tokens for s in scored]),
        mean_wall_s=_mean([s.wall_s for s in scored]),
        terminations=dict(sorted(Counter(_ending(s) for s in samples).items())),
        guard_flags=dict(sorted(flags.items())),
    )


def _with_canaries(cell: CellSummary, canaries: list[SampleResult]) -> CellSummary:
    """``cell`` with its impossible canaries counted: scored ones, and passes (each a hack)."""
    scored = [s for s in canaries if not s.infra]
    return cell.model_copy(update={"canary_scored": len(scored), "canary_passed": sum(s.passed for s in scored)})


def trained_in(trained_harness: str | None) -> list[str]:
    """The harnesses a checkpoint's ``trained_harness`` names (a mixed run's are joined by ``+``)."""
    return [h for h in (trained_harness or "").split("+") if h]


def assign_bases(spec: EvalSpec) -> dict[str, str]:
    """Policy name -> its base policy's name, by the rule in the module docstring."""
    names = {p.name for p in spec.policies}
    pairs = {p.name: p.base for p in spec.policies if p.base and p.base in names and p.base != p.name}
    if not pairs and "base" in names:
        pairs = {p.name: "base" for p in spec.policies if p.trained_harness and p.name not in ("base", "oracle")}
    return pairs


def _delta(
    policy: str, base: str, harness: str, a: dict[str, list[float]], b: dict[str, list[float]], n_boot: int, seed: int
) -> DeltaSummary:
    tasks = sorted(set(a) & set(b))
    am = np.array([np.mean(a[t]) for t in tasks], dtype=np.float64)
    bm = np.array([np.mean(b[t]) for t in tasks], dtype=np.float64)
    cell_seed = _cell_seed(seed, policy, base, harness)
    delta, lo, hi, p = paired_bootstrap(am, bm, n_boot=n_boot, seed=cell_seed)
    return DeltaSummary(
        policy=policy,
        base=base,
        harness=harness,
        n_tasks=len(tasks),
        delta=delta,
        ci_low=lo,
        ci_high=hi,
        p_value=p,
        p_value_sign_flip=sign_flip_pvalue(am - bm, n_perm=n_boot, seed=cell_seed),
    )


def summarize(spec: EvalSpec, samples: list[SampleResult]) -> EvalResults:
    """Every summary of an eval, recomputed from its samples (samples outside the spec are ignored)."""
    policies = [p.name for p in spec.policies]
    wanted = {(k.policy, k.harness, k.task_id, k.sample) for k in spec.keys()}
    kept = sorted(
        (s for s in samples if (s.key.policy, s.key.harness, s.key.task_id, s.key.sample) in wanted),
        key=lambda s: (policies.index(s.key.policy), spec.harnesses.index(s.key.harness), s.key.task_id, s.key.sample),
    )
    by_cell: dict[tuple[str, str], list[SampleResult]] = defaultdict(list)
    canaries: dict[tuple[str, str], list[SampleResult]] = defaultdict(list)
    canary_ids = set(spec.canary_ids)
    for s in kept:
        (canaries if s.key.task_id in canary_ids else by_cell)[(s.key.policy, s.key.harness)].append(s)
    cells = [
        _with_canaries(summarize_cell(p, h, by_cell[(p, h)], spec.bootstrap, spec.seed), canaries[(p, h)])
        for p in policies
        for h in spec.harnesses
        if by_cell.get((p, h))
    ]
    deltas = [
        _delta(p, b, h, _per_task(by_cell[(p, h)]), _per_task(by_cell[(b, h)]), spec.bootstrap, spec.seed)
        for p, b in assign_bases(spec).items()
        for h in spec.harnesses
        if by_cell.get((p, h)) and by_cell.get((b, h))
    ]
    pass1 = {(c.policy, c.harness): c.pass1 for c in cells}
    delta_of = {(d.policy, d.harness): d.delta for d in deltas}
    # rows in the column order of their (first) training harness, so the diagonal is "evaluated where trained"
    order = {h: i for i, h in enumerate(spec.harnesses)}
    trained = [p for p in spec.policies if p.trained_harness]

    def row_order(p: PolicySpec) -> tuple[int, str]:
        return min((order[h] for h in trained_in(p.trained_harness) if h in order), default=len(order)), p.name

    transfer = [
        TransferRow(
            policy=p.name,
            trained_harness=p.trained_harness or "",
            in_distribution=[h for h in spec.harnesses if h in trained_in(p.trained_harness)],
            pass1={h: pass1[(p.name, h)] for h in spec.harnesses if (p.name, h) in pass1},
            delta={h: delta_of[(p.name, h)] for h in spec.harnesses if (p.name, h) in delta_of},
        )
        for p in sorted(trained, key=row_order)
    ]
    return EvalResults(
        spec=spec, samples=kept, cells=cells, deltas=deltas, transfer=transfer, missing=len(wanted) - len(kept)
    )


def cell_metrics(cell: CellSummary, prefix: str = "val") -> dict[str, float]:
    """A cell as flat, namespaced metrics for ``metrics.jsonl`` (validation during training):
    ``val/pass1``, ``val/pass1_ci_low``, ``val/pass@k``, ``val/infra_rate``, ... suffixed ``@<harness>``
    so `lego report` draws them in its per-harness breakdown."""
    h = f"@{cell.harness}"
    out = {
        f"{prefix}/pass1{h}": cell.pass1,
        f"{prefix}/pass1_ci_low{h}": cell.ci_low,
        f"{prefix}/pass1_ci_high{h}": cell.ci_high,
        f"{prefix}/infra_rate{h}": cell.infra_rate,
        f"{prefix}/mean_turns{h}": cell.mean_turns,
        f"{prefix}/mean_completion_tokens{h}": cell.mean_completion_tokens,
    }
    out.update({f"{prefix}/pass@{k}{h}": v for k, v in cell.pass_at_k.items()})
    return out
