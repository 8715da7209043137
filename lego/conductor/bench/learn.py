"""`lego bench learn`: does the default `lego train` raise held-out pass@1 beyond what a temperature knob gives?

RL that only sharpens a policy does what a lower sampling temperature does, so a comparison at one
shared temperature can credit RL with a temperature change. This bench compares fairly: (1) the start
policy (``engine.model``) is sampled on the held-out tasks at every temperature of
``eval.temperatures``, ``eval.sweep_samples`` samples per task each, into ``OUT/eval/T<temperature>``;
(2) ``lego train`` runs with ``OUT/train`` as its run dir, a checkpoint every step, until ``--minutes``
are spent (the step in flight finishes); (3) the last checkpoint saved within the budget is sampled at
the same temperatures, tasks and per-sample seeds (the start's samples are reused); with
``eval.confirm_samples`` (default 8) each policy then gets that many fresh samples per task at its
best temperature (the start's before training), on which best-vs-best and pass@k are scored; (4)
:func:`lego.eval.sweep.compare_sweeps` scores each policy at its own best temperature (best-vs-best:
paired bootstrap CI and permutation p-value that re-pick the temperatures, plus a selection-free
split-half estimate), every same-temperature delta, and unbiased pass@k before and after; (5)
``OUT/learn.json`` (every number, eval and training wall times) and ``OUT/learn.png``
(:mod:`lego.conductor.bench.learn_plot`).

All samples go through the eval code with the production rollout
(:func:`lego.conductor.eval_samples.eval_sample_fn`), so the numbers come from the same rollout code
as training; ``eval.max_tokens`` bounds each policy completion and ``eval.concurrency`` the samples
in flight (:mod:`lego.conductor.bench.learn_sweep`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from lego.errors import ConfigError
from lego.io import atomic_write_json

__all__ = ["command", "compare_to_start", "copy_start", "pick_checkpoint", "report_head", "run_bench", "sweep_start"]


class _BudgetSpent(Exception):
    """Raised from the step callback once the wall-clock budget is used up (after the step is saved)."""


def pick_checkpoint(
    ended: list[tuple[int, float]], budget_s: float, run_root: Path
) -> tuple[Path | None, int | None, float | None]:
    """The checkpoint to evaluate: the last one saved within the budget, as (dir, steps, seconds).

    ``ended`` holds (0-based step, seconds since training started) as each step's checkpoint was
    saved. Only the step in flight can end past the budget, and its predecessor is still on disk
    (lego.conductor.loop keeps the last two), so normally the policy evaluated trained <= the budget. When no
    step ended within it (a first step longer than the budget, or a resumed run), the newest
    checkpoint, with None for the steps and seconds."""
    from lego.training.checkpoint import load_latest

    within = [(s, e) for s, e in ended if e <= budget_s]
    if within:
        path = run_root / "checkpoints" / f"step_{within[-1][0] + 1:06d}"
        if (path / "trainer_state.json").exists():
            return path, within[-1][0] + 1, within[-1][1]
    return load_latest(run_root), None, None


def _headline(cmp: dict[str, Any]) -> str:
    c = cmp.get("confirmed")
    if c is not None:
        s, b = c["scored"], cmp["best_vs_best"]
        return (
            f"best-vs-best held-out pass@1 on fresh samples ({c['samples']} per task at each policy's best "
            f"temperature): {100 * s['after']:.1f}% (trained, T={c['after_temperature']:g}) vs {100 * s['before']:.1f}% "
            f"(start, T={c['before_temperature']:g}): {100 * s['delta']:+.1f} points [{100 * s['ci95'][0]:+.1f}, "
            f"{100 * s['ci95'][1]:+.1f}], p={s['p_value']:.3g}; on the sweep's own samples (best of "
            f"{len(cmp['temperatures'])}, re-picked per resample): {100 * b['delta']:+.1f} "
            f"[{100 * b['ci95'][0]:+.1f}, {100 * b['ci95'][1]:+.1f}]"
        )
    b = cmp["best_vs_best"]
    lo, hi = b["ci95"]
    split = b.get("split")
    tail = ""
    if split is not None:
        s = split["scored"]
        tail = (
            f"; selection-free (temperatures chosen on even samples, scored on odd): {100 * s['delta']:+.1f} "
            f"[{100 * s['ci95'][0]:+.1f}, {100 * s['ci95'][1]:+.1f}]"
        )
    return (
        f"best-vs-best held-out pass@1 {100 * b['after']:.1f}% (trained, T={b['after_temperature']:g}) vs "
        f"{100 * b['before']:.1f}% (start, T={b['before_temperature']:g}): {100 * b['delta']:+.1f} points "
        f"[{100 * lo:+.1f}, {100 * hi:+.1f}], p={b['p_value']:.3g}{tail}"
    )


def run_bench(
    out: Path,
    minutes: float,
    limit: int | None,
    seed: int,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    eval_seed: int | None = None,
    factory: Any = None,
) -> dict[str, Any]:
    """The whole benchmark (see the module doc); returns the report also written to ``learn.json``.

    ``factory`` replaces the production sample function of the sweeps (a
    :class:`lego.eval.runner.SampleFnFactory`; tests pass a deterministic one)."""
    from rich.console import Console

    from lego.conductor.bench.learn_plot import plot_learn
    from lego.conductor.loop import train
    from lego.config import load_config
    from lego.io import read_jsonl
    from lego.tasks.sources import load_tasks

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
    tasks = load_tasks(cfg.tasks.split_spec(cfg.tasks.eval_split), cfg.tasks.where, limit)
    start_model = cfg.engine.model
    report = report_head(cfg, minutes, len(tasks), seed, eval_seed)
    t0 = time.monotonic()
    sweep_start(cfg, tasks, out, eval_seed, factory, console, report)

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
        train(cfg, console=console, on_step=stop_when_spent)
    except _BudgetSpent:
        pass
    report["train_s"] = round(time.monotonic() - t_train, 1)
    run_root = Path(cfg.training.out_dir)
    steps = read_jsonl(run_root / "metrics.jsonl") if (run_root / "metrics.jsonl").is_file() else []
    report["steps_run"] = len(steps)
    pick, within_step, within_s = pick_checkpoint(ended, budget, run_root)
    report["after_within_budget"] = within_step is not None
    report["steps"] = within_step if within_step is not None else len(steps)
    report["after_train_s"] = round(within_s, 1) if within_s is not None else report["train_s"]
    if steps and pick is not None:
        console.print(f"[3/3] the trained policy after {report['steps']} steps ({pick}) at the same temperatures")
        compare_to_start(cfg, start_model, pick, tasks, out, eval_seed, factory, console, report)
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
    plot_learn(report, out / "learn.png")
    atomic_write_json(out / "learn.json", report, indent=1)
    return report


def report_head(cfg: Any, minutes: float, tasks: int, seed: int, eval_seed: int) -> dict[str, Any]:
    """The settings every learning bench's report starts with."""
    return {
        "minutes": minutes,
        "start_model": cfg.engine.model,
        "tasks": tasks,
        "samples": cfg.eval.sweep_samples,
        "confirm_samples": cfg.eval.confirm_samples,
        "temperatures": list(cfg.eval.temperatures),
        "pass_at_k": list(cfg.eval.pass_at_k),
        "train_temperature": cfg.algorithm.temperature,
        "eval_max_tokens": cfg.eval.max_tokens,
        "eval_concurrency": cfg.eval.concurrency,
        "seed": seed,
        "eval_seed": eval_seed,
        "comparison": None,
    }


def copy_start(source: Path, out: Path) -> int:
    """``--start-from``: another learning bench run's samples of the start policy, into a fresh
    ``out/eval``, so this run (same ``--eval-seed``) does not sample the start again. Only the start's:
    each eval directory's ``samples/start`` and ``trajectories/start``, and its ``spec.json`` naming the
    start alone. The other run's trained policy stays behind: in an eval directory a name is bound to one
    model, and ``trained`` is this run's checkpoint, so a whole copied ``OUT/eval`` would stop this run's
    comparison (a ResumeError) after all its training. Returns the sample files copied."""
    import shutil

    src, dst = source / "eval", out / "eval"
    specs = sorted(src.glob("*/spec.json"))
    if not any((spec.parent / "samples" / "start").is_dir() for spec in specs):
        raise ConfigError(f"--start-from {source}: no start samples in {src}/*/samples/start; give the --out of "
                          "an earlier `lego bench learn` or `lego bench use` run")  # fmt: skip
    if dst.exists() and any(dst.iterdir()):
        held = {
            p.get("name") for spec in dst.glob("*/spec.json") for p in json.loads(spec.read_text()).get("policies", [])
        }
        if held == {"start"}:
            return 0  # copied by an earlier try of this command (one that stopped before sampling anything)
        raise ConfigError(
            f"--start-from {source}: {dst} already holds samples of {sorted(map(str, held))}; give a fresh --out"
        )
    copied = 0
    for spec in specs:
        data = json.loads(spec.read_text(encoding="utf-8"))
        data["policies"] = [p for p in data.get("policies", []) if p.get("name") == "start"]
        if not data["policies"]:
            continue
        into = dst / spec.parent.name
        for sub in ("samples", "trajectories"):
            if (spec.parent / sub / "start").is_dir():
                shutil.copytree(spec.parent / sub / "start", into / sub / "start")
        atomic_write_json(into / "spec.json", data, indent=1)
        copied += sum(1 for f in (into / "samples" / "start").rglob("*") if f.is_file())
    return copied


def _check_own_eval(out: Path) -> None:
    """``out/eval`` must not hold another run's trained policy (a copied ``OUT/eval``): this run's
    comparison binds ``trained`` to its own checkpoint and would stop after all the training."""
    for spec in sorted((out / "eval").glob("*/spec.json")):
        for p in json.loads(spec.read_text(encoding="utf-8")).get("policies", []):
            model = Path(str(p.get("model", "")))
            if p.get("name") == "trained" and not model.resolve().is_relative_to(out.resolve()):
                raise ConfigError(
                    f"{spec.parent} holds samples of another run's trained policy ({model}); this run's "
                    "`trained` is its own checkpoint. Reuse only the start's samples: a fresh --out with "
                    "--start-from THAT_RUN's --out"
                )


def sweep_start(
    cfg: Any, tasks: list[Any], out: Path, eval_seed: int, factory: Any, console: Any, report: dict[str, Any]
) -> None:
    """Phase 1 of the learning benches: the start policy (``engine.model``) over the temperature sweep
    on ``tasks``, then its confirm samples at its best temperature; bookkeeping into ``report``. Checks
    first that ``out/eval`` holds no other run's trained policy (:func:`copy_start`)."""
    from lego.conductor.bench.learn_sweep import best_temperature, point_counters, run_confirm, run_sweep

    _check_own_eval(out)
    start_model, temps, n = cfg.engine.model, list(cfg.eval.temperatures), cfg.eval.sweep_samples
    console.print(
        f"[1/3] the start policy on {len(tasks)} held-out tasks x {n} samples at T = {', '.join(map(str, temps))}"
        + (f", then {cfg.eval.confirm_samples} at its best" if cfg.eval.confirm_samples else "")
    )
    before, wall = run_sweep(cfg, {"start": start_model}, tasks, out / "eval", eval_seed, factory)
    report["before_sweep"] = {"wall_s": round(wall, 1), "points": point_counters(before, "start")}
    for p in report["before_sweep"]["points"]:
        lo, hi = p["ci95_all_tasks"]
        console.print(f"      T={p['temperature']:g}: pass@1 {p['pass1_all_tasks']:.3f} [95% CI {lo:.3f}, {hi:.3f}]")
    if cfg.eval.confirm_samples:
        chosen = best_temperature(before, "start", [t.instance_id for t in tasks], n)
        console.print(f"      confirm: {cfg.eval.confirm_samples} fresh samples per task at its best, T={chosen:g}")
        _, cwall = run_confirm(cfg, {"start": (start_model, chosen)}, tasks, out / "eval", eval_seed, factory)
        report["before_sweep"].update(confirm_wall_s=round(cwall, 1), confirm_temperature=chosen)


def compare_to_start(
    cfg: Any,
    start_model: str,
    pick: Path,
    tasks: list[Any],
    out: Path,
    eval_seed: int,
    factory: Any,
    console: Any,
    report: dict[str, Any],
) -> None:
    """Phase 3: the trained checkpoint ``pick`` at the same temperatures, tasks and seeds, compared with
    the start best-vs-best (the start's samples in ``out/eval`` are reused); into ``report``."""
    from lego.conductor.bench.learn_sweep import compare_policies

    report["after_checkpoint"] = str(pick)
    comparison, after = compare_policies(cfg, start_model, str(pick), tasks, out / "eval", eval_seed, factory)
    report["after_sweep"] = after
    report["comparison"] = comparison.model_dump(mode="json")
    report["headline"] = _headline(report["comparison"])
    console.print(f"      {report['headline']}")


def _temperatures(value: str | None) -> list[str]:
    """``--temperatures 0.6,0.8,1.0`` as a config override; a bad list names the flag and the fix."""
    if value is None:
        return []
    try:
        temps = [float(t) for t in value.split(",") if t.strip()]
    except ValueError as exc:
        raise ConfigError(f"--temperatures {value!r}: give comma-separated numbers, e.g. 0.6,0.8,1.0,1.2") from exc
    return [f"eval.temperatures=[{', '.join(map(str, temps))}]"]


@click.command("learn")
@click.option(
    "--minutes",
    type=float,
    default=25.0,
    show_default=True,
    help="Wall-clock budget of `lego train` (with the default --limit the whole bench took 61 min on 2 cores).",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default="runs/bench-learn",
              show_default=True)  # fmt: skip
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Held-out tasks evaluated (16 samples each per policy; 30 keeps the whole bench within 75 min on 2 cores).",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=None,
    help="eval.sweep_samples: samples per task at each temperature of the sweep, where each policy's best "
    "temperature is chosen (default 2).",
)
@click.option(
    "--confirm-samples",
    type=click.IntRange(min=0),
    default=None,
    help="eval.confirm_samples: fresh samples per task at each policy's best temperature, where best-vs-best and "
    "pass@k are scored (default 8; at least the largest eval.pass_at_k; 0 scores them on the sweep's samples).",
)
@click.option(
    "--temperatures",
    default=None,
    metavar="T1,T2,...",
    help="eval.temperatures: the sweep both policies are sampled at (default 0.6,0.8,1.0,1.2).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Training seed (and eval seed by default).")
@click.option(
    "--eval-seed",
    type=int,
    default=None,
    help="Eval base seed (default: --seed). Two training seeds with one eval seed share the start policy's "
    "samples: --start-from the first run's --out skips re-evaluating it.",
)
@click.option(
    "--start-from",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The --out of an earlier learning bench run with the same --eval-seed: its start-policy samples are "
    "copied into this --out (a fresh one), so the start is not sampled again.",
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
    samples: int | None,
    confirm_samples: int | None,
    temperatures: str | None,
    seed: int,
    eval_seed: int | None,
    start_from: Path | None,
    config: str | None,
    overrides: tuple[str, ...],
) -> None:
    """Held-out pass@1 of the start and the trained policy over a temperature sweep, compared at each one's
    best temperature, with pass@k before and after (JSON + PNG in --out)."""
    if start_from is not None:
        copy_start(start_from, out_dir)
    extra = [
        *_temperatures(temperatures),
        *([f"eval.sweep_samples={samples}"] if samples is not None else []),
        *([f"eval.confirm_samples={confirm_samples}"] if confirm_samples is not None else []),
    ]
    report = run_bench(out_dir, minutes, limit, seed, config, (*overrides, *extra), eval_seed=eval_seed)
    click.echo(json.dumps({k: v for k, v in report.items() if k != "per_step"}, indent=1))
