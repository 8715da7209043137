"""`lego bench learn`: does the default `lego train` raise held-out pass@1 in a fixed wall-clock budget?

The figure that matters for the embedded default: the starting policy's held-out pass@1 against
the pass@1 of the policy after ``--minutes`` of the default RL loop, both measured through the eval
code (:func:`lego.eval.runner.run_eval` with the production rollout, :func:`lego.conductor.eval_samples.eval_sample_fn`)
on the same tasks with the same per-sample seeds, so the delta is paired (bootstrap CI and p-value
from :mod:`lego.eval.matrix`). The "before" policy is the baseline measured in the same run.

Steps: (1) evaluate the start policy (``engine.model`` of the config) into ``OUT/eval``; (2) run
``lego train`` with ``OUT/train`` as its run dir, a checkpoint every step, until the budget is spent
(the step in flight finishes); (3) evaluate the last checkpoint saved within the budget into the
same ``OUT/eval`` (the start policy's samples are reused); (4) write ``OUT/learn.json`` and ``OUT/learn.png`` (reward,
held-out pass@1 before/after with CIs, and the rollout-train Pearson per step).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from lego.io import atomic_write_json

__all__ = ["command", "pick_checkpoint", "run_bench"]


class _BudgetSpent(Exception):
    """Raised from the step callback once the wall-clock budget is used up (after the step is saved)."""


def _evaluate(cfg: Any, policies: dict[str, str], tasks: list[Any], out: Path, samples: int, seed: int) -> Any:
    from lego.conductor.eval_samples import eval_sample_fn
    from lego.eval.results import EvalSpec, PolicySpec
    from lego.eval.runner import run_eval

    names = list(policies)
    specs = [PolicySpec(name=n, model=m, base=names[0] if i else None) for i, (n, m) in enumerate(policies.items())]
    spec = EvalSpec(
        policies=specs,
        harnesses=[cfg.harness.name],
        task_ids=[t.instance_id for t in tasks],
        samples=samples,
        seed=seed,
        tasks_source=f"{cfg.tasks.source}:{cfg.tasks.eval_split}",
        temperature=cfg.algorithm.temperature,
        max_turns=cfg.harness.max_turns,
        timeout_s=cfg.harness.timeout_s,
    )
    run_sample = eval_sample_fn(spec, {t.instance_id: t for t in tasks}, out, cfg)
    return run_eval(spec, run_sample, out, concurrency=cfg.eval.concurrency)


def pick_checkpoint(
    ended: list[tuple[int, float]], budget_s: float, run_root: Path
) -> tuple[Path | None, int | None, float | None]:
    """The checkpoint to evaluate: the last one saved within the budget, as (dir, steps, seconds).

    ``ended`` holds (0-based step, seconds since training started) as each step's checkpoint was
    saved. Only the step in flight can end past the budget, and its predecessor is still on disk
    (lego.conductor.loop keeps the last two), so normally the policy evaluated trained <= the budget. When no
    step ended within it (a first step longer than the budget, or a resumed run), the newest
    checkpoint, with None for the steps and seconds."""
    from lego.conductor.checkpoint import load_latest

    within = [(s, e) for s, e in ended if e <= budget_s]
    if within:
        path = run_root / "checkpoints" / f"step_{within[-1][0] + 1:06d}"
        if (path / "trainer_state.json").exists():
            return path, within[-1][0] + 1, within[-1][1]
    return load_latest(run_root), None, None


def _cell(results: Any, policy: str) -> dict[str, Any]:
    cell = next(c for c in results.cells if c.policy == policy)
    return {
        "pass1": cell.pass1,
        "ci95": [cell.ci_low, cell.ci_high],
        "n_tasks": cell.n_tasks,
        "n_samples": cell.n_samples,
        "n_infra": cell.n_infra,
        "terminations": cell.terminations,
        "mean_turns": cell.mean_turns,
    }


def _plot(steps: list[dict[str, Any]], report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    from lego.eval.plots import save_png

    xs = [s["step"] for s in steps]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(xs, [s["metrics"].get("reward/mean", 0.0) for s in steps], marker="o")
    axes[0].set(title="train reward (mean per step)", xlabel="step", ylim=(-0.02, 1.02))
    b, a = report["before"], report["after"]
    last = report.get("steps") or (xs[-1] if xs else 1)  # the step of the checkpoint evaluated
    for x, cell, label in ((0, b, "start"), (last, a, "after training")):
        if cell:
            lo, hi = cell["ci95"]
            axes[1].errorbar([x], [cell["pass1"]], yerr=[[cell["pass1"] - lo], [hi - cell["pass1"]]], fmt="o",
                             capsize=4, label=label)  # fmt: skip
    val = [(s["step"], v) for s in steps for k, v in s["metrics"].items() if k.startswith("val/pass1@")]
    if val:
        axes[1].plot(*zip(*val, strict=True), marker=".", linestyle="--", label="validation during training")
    axes[1].set(
        title=f"held-out pass@1 (95% CI, n={b['n_tasks'] if b else 0} tasks)", xlabel="step", ylim=(-0.02, 1.02)
    )
    axes[1].legend(fontsize=8)
    pear = [(x, s["metrics"].get("training/rollout_actor_probs_pearson_corr")) for x, s in zip(xs, steps, strict=True)]
    pear = [(x, p) for x, p in pear if p is not None]
    if pear:
        axes[2].plot(*zip(*pear, strict=True), marker="o")
    axes[2].axhline(0.999, color="red", linestyle=":", label="0.999 (acceptance floor)")
    low = min([p for _, p in pear] + [0.999])
    axes[2].set(title="rollout-train Pearson", xlabel="step", ylim=(low - 0.0005, 1.0002))
    axes[2].ticklabel_format(axis="y", useOffset=False)
    axes[2].legend(fontsize=8)
    save_png(fig, path)


def run_bench(
    out: Path,
    minutes: float,
    limit: int | None,
    samples: int,
    seed: int,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    eval_seed: int | None = None,
) -> dict[str, Any]:
    """The whole benchmark (see the module doc); returns the report also written to ``learn.json``."""
    from rich.console import Console

    from lego.conductor.cli.eval import load_tasks
    from lego.conductor.loop import train
    from lego.config import load_config
    from lego.io import read_jsonl

    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    eval_seed = seed if eval_seed is None else eval_seed
    cfg = load_config(
        config,
        [
            *overrides,
            f"training.out_dir={out / 'train'}",
            "training.steps=100000",
            "training.checkpoint_every=1",
            f"training.seed={seed}",
        ],
    )
    tasks = load_tasks(f"{cfg.tasks.source}:{cfg.tasks.eval_split}", limit)
    start_model = cfg.engine.model
    report: dict[str, Any] = {
        "minutes": minutes,
        "start_model": start_model,
        "tasks": len(tasks),
        "samples": samples,
        "seed": seed,
        "eval_seed": eval_seed,
        "before": None,
        "after": None,
    }
    t0 = time.monotonic()
    console.print(f"[1/3] held-out pass@1 of the start policy: {len(tasks)} tasks x {samples} samples")
    before = _evaluate(cfg, {"start": start_model}, tasks, out / "eval", samples, eval_seed)
    report["before"] = _cell(before, "start")
    report["eval_before_s"] = round(time.monotonic() - t0, 1)
    console.print(f"      pass@1 {report['before']['pass1']:.3f} {report['before']['ci95']}")

    t_train = time.monotonic()
    budget = minutes * 60.0

    ended: list[tuple[int, float]] = []  # (step, seconds since training started) when its checkpoint was saved

    def stop_when_spent(step: int, metrics: dict[str, float]) -> None:
        ended.append((step, time.monotonic() - t_train))
        if ended[-1][1] >= budget:
            raise _BudgetSpent

    console.print(
        f"[2/3] lego train for {minutes:g} min (the step in flight finishes; the last checkpoint saved "
        "within the budget is the one evaluated)"
    )
    try:
        run = train(cfg, console=console, on_step=stop_when_spent)
    except _BudgetSpent:
        run = None
    report["train_s"] = round(time.monotonic() - t_train, 1)
    run_root = Path(cfg.training.out_dir)
    steps = read_jsonl(run_root / "metrics.jsonl") if (run_root / "metrics.jsonl").is_file() else []
    report["steps_run"] = len(steps)
    pick, within_step, within_s = pick_checkpoint(ended, budget, run_root)
    report["after_within_budget"] = within_step is not None
    report["steps"] = within_step if within_step is not None else len(steps)
    report["after_train_s"] = round(within_s, 1) if within_s is not None else report["train_s"]
    if steps and pick is not None:
        ckpt = str(pick)
        console.print(f"[3/3] held-out pass@1 after {report['steps']} steps ({ckpt})")
        t_after = time.monotonic()
        after = _evaluate(cfg, {"start": start_model, "trained": ckpt}, tasks, out / "eval", samples, eval_seed)
        report["after"] = _cell(after, "trained")
        report["after_checkpoint"] = ckpt
        report["eval_after_s"] = round(time.monotonic() - t_after, 1)
        delta = next((d for d in after.deltas if d.policy == "trained"), None)
        if delta is not None:
            report["delta"] = {"pass1": delta.delta, "ci95": [delta.ci_low, delta.ci_high], "p_value": delta.p_value}
    pearsons = [s["metrics"].get("training/rollout_actor_probs_pearson_corr") for s in steps]
    report["pearson_min"] = min((p for p in pearsons if p is not None), default=None)
    report["per_step"] = [
        {
            "step": s["step"],
            "reward": s["metrics"].get("reward/mean"),
            "pearson": s["metrics"].get("training/rollout_actor_probs_pearson_corr"),
            "groups_with_signal": s["metrics"].get("train/groups_with_signal"),
            "wall_s": s.get("wall_s"),
        }
        for s in steps
    ]
    report["total_s"] = round(time.monotonic() - t0, 1)
    _plot(steps, report, out / "learn.png")
    atomic_write_json(out / "learn.json", report, indent=1)
    del run
    return report


@click.command("learn")
@click.option("--minutes", type=float, default=20.0, show_default=True, help="Wall-clock budget of `lego train`.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default="runs/bench-learn",
              show_default=True)  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Held-out tasks evaluated.")
@click.option("--samples", type=click.IntRange(min=1), default=4, show_default=True, help="Samples per task.")
@click.option("--seed", type=int, default=0, show_default=True, help="Training seed (and eval seed by default).")
@click.option(
    "--eval-seed",
    type=int,
    default=None,
    help="Eval base seed (default: --seed). Two training seeds with one eval seed share the start policy's "
    "samples: copy OUT/eval of the first run into the second's OUT to skip re-evaluating it.",
)
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Train config (default: the embedded default).",
)
@click.option("-o", "overrides", multiple=True, metavar="KEY=VALUE", help="Config override (repeatable).")
def command(
    minutes: float,
    out_dir: Path,
    limit: int,
    samples: int,
    seed: int,
    eval_seed: int | None,
    config: str | None,
    overrides: tuple[str, ...],
) -> None:
    """Held-out pass@1 before and after `lego train` runs for --minutes (JSON + PNG in --out)."""
    report = run_bench(out_dir, minutes, limit, samples, seed, config, overrides, eval_seed=eval_seed)
    click.echo(json.dumps({k: v for k, v in report.items() if k != "per_step"}, indent=1))
