"""The PNG of `lego bench learn`, the figure a reader looks at first.

Top row: (a) held-out pass@1 against the sampling temperature, start and trained policy, 95% CIs,
each policy's chosen temperature ringed and, with a confirm stage, its fresh samples there as a star;
(b) unbiased pass@k against k, each policy at its chosen temperature, 95% CIs. Bottom row: the
training run (mean reward per step -- for `lego bench use`, the share of sessions the person thanked
per quarter of the budget -- and the rollout-train Pearson per step). The title carries the best-vs-best
difference (on the fresh samples when there are any) with its CI and p-value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["green_shares", "plot_learn", "reward_limits"]


def _errorbar(ax: Any, xs: list[float], ys: list[float], cis: list[tuple[float, float]], **kw: Any) -> None:
    lower = [y - lo for y, (lo, _) in zip(ys, cis, strict=True)]
    upper = [hi - y for y, (_, hi) in zip(ys, cis, strict=True)]
    ax.errorbar(xs, ys, yerr=[lower, upper], capsize=4, marker="o", **kw)


def reward_limits(rewards: list[float]) -> tuple[float, float]:
    """Panel (c)'s y range: [0, 1] for a grader's pass rate, [-1, 1] once a score is negative (a judge's
    verdicts in `lego bench use`: a range cut at 0 would hide every step that was mostly re-queried)."""
    return (-1.02 if any(r < 0 for r in rewards) else -0.02, 1.02)


def green_shares(report: dict[str, Any]) -> list[tuple[int, float, str]]:
    """Panel (c) of `lego bench use`: each quarter of the budget, the share of its sessions the person
    thanked and ``green/sessions`` (none for `lego bench learn`, whose report has no sessions)."""
    rows = report.get("session_quarters") or []
    return [
        (int(r["quarter"]), r["green"] / r["sessions"] if r["sessions"] else 0.0, f"{r['green']}/{r['sessions']}")
        for r in rows
    ]


def plot_learn(report: dict[str, Any], path: Path) -> None:
    """Draw ``report`` (the dict written to ``learn.json``) into ``path``."""
    import matplotlib.pyplot as plt

    from lego.eval.plots import save_png

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.4))
    cmp = report.get("comparison")
    ax = axes[0][0]
    if cmp is not None:
        best = cmp.get("confirmed") or cmp["best_vs_best"]  # the temperatures chosen
        for side, label, chosen, colour in (
            ("before", "start", best["before_temperature"], "tab:blue"),
            ("after", f"trained ({report.get('steps')} steps)", best["after_temperature"], "tab:orange"),
        ):
            points = cmp[side]
            dodge = -0.008 if side == "before" else 0.008  # side by side, so overlapping CIs stay readable
            _errorbar(
                ax,
                [p["temperature"] + dodge for p in points],
                [p["pass1"] for p in points],
                [tuple(p["ci95"]) for p in points],
                label=label,
                color=colour,
            )
            top = next(p for p in points if p["temperature"] == chosen)
            ax.plot([chosen + dodge], [top["pass1"]], marker="o", markersize=14, fillstyle="none", color=colour)
            if cmp.get("confirmed"):  # the fresh samples at the chosen temperature: what best-vs-best scores
                c = cmp["confirmed"]
                ax.errorbar(
                    [chosen + 2 * dodge],
                    [c["scored"][side]],
                    yerr=[[c["scored"][side] - c[f"{side}_ci95"][0]], [c[f"{side}_ci95"][1] - c["scored"][side]]],
                    marker="*",
                    markersize=12,
                    color=colour,
                    capsize=3,
                    label=f"{label}: {c['samples']} fresh samples at its best",
                )
        ax.set(xticks=cmp["temperatures"])
    elif report.get("before_sweep"):
        points = report["before_sweep"]["points"]
        ax.plot([p["temperature"] for p in points], [p["pass1_all_tasks"] for p in points], marker="o", label="start")
    ax.set(
        title=f"(a) held-out pass@1 vs temperature (95% CI, {report['tasks']} tasks × {report['samples']} samples)",
        xlabel="sampling temperature",
        ylim=(-0.02, 1.02),
    )
    ax.legend(fontsize=8)
    ax = axes[0][1]
    if cmp is not None:
        rows = cmp["pass_at_k"]
        ks = [r["k"] for r in rows]
        best = cmp.get("confirmed") or cmp["best_vs_best"]
        for side, label, colour in (
            ("before", f"start at T = {best['before_temperature']:g}", "tab:blue"),
            ("after", f"trained at T = {best['after_temperature']:g}", "tab:orange"),
        ):
            dodge = 0.97 if side == "before" else 1.03
            _errorbar(
                ax,
                [k * dodge for k in ks],
                [r[side] for r in rows],
                [tuple(r[f"{side}_ci95"]) for r in rows],
                label=label,
                color=colour,
            )
        ax.set_xscale("log", base=2)
        ax.set(xticks=ks, xticklabels=[str(k) for k in ks])
        ax.legend(fontsize=8)
    ax.set(title="(b) held-out pass@k, each policy at its best temperature", xlabel="k", ylim=(-0.02, 1.02))
    steps = report.get("per_step") or []
    quarters = green_shares(report)
    if quarters:  # `lego bench use`: a step's mean score is what its pick made it; the person's thanks are not
        ax = axes[1][0]
        ax.bar([q for q, _, _ in quarters], [share for _, share, _ in quarters], color="tab:green")
        for q, share, label in quarters:
            ax.annotate(label, (q, share), ha="center", va="bottom", fontsize=8)
        ax.set(
            title="(c) sessions the person thanked, per quarter of the budget (by start)",
            xlabel="quarter",
            xticks=[q for q, _, _ in quarters],
            ylim=(0, max(0.5, 1.15 * max(share for _, share, _ in quarters))),
        )
    else:
        xs = [s["step"] for s in steps]
        rewards = [s["reward"] if s["reward"] is not None else float("nan") for s in steps]
        axes[1][0].plot(xs, rewards, marker="o")
        axes[1][0].set(
            title=f"(c) train reward (mean per step, T = {report.get('train_temperature', '?')})",
            xlabel="step",
            ylim=reward_limits(rewards),
        )
    pear = [(s["step"], s["pearson"]) for s in steps if s["pearson"] is not None]
    ax = axes[1][1]
    if pear:
        ax.plot(*zip(*pear, strict=True), marker="o")
    ax.axhline(0.999, color="red", linestyle=":", label="0.999 (acceptance floor)")
    low = min([p for _, p in pear] + [0.999])
    ax.set(title="(d) rollout-train Pearson", xlabel="step", ylim=(low - 0.0005, 1.0002))
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.legend(fontsize=8)
    if cmp is not None:
        b = cmp["best_vs_best"]
        lo, hi = b["ci95"]
        if cmp.get("confirmed"):
            c = cmp["confirmed"]
            b = {
                **c["scored"],
                "after_temperature": c["after_temperature"],
                "before_temperature": c["before_temperature"],
            }
            lo, hi = b["ci95"]
        fig.suptitle(
            f"best-vs-best held-out pass@1: {100 * b['after']:.1f}% (T = {b['after_temperature']:g}) vs "
            f"{100 * b['before']:.1f}% (T = {b['before_temperature']:g}): {100 * b['delta']:+.1f} points "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}], p = {b['p_value']:.3g}",
            fontsize=11,
        )
    fig.tight_layout()
    save_png(fig, path)
