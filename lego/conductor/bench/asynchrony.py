"""`lego bench async`: what asynchronous training buys on this machine, against the synchronous loop.

For each ``k`` of ``--staleness`` (default 0,1,2), ``lego train`` runs the same config with
``training.max_staleness = k`` for the same wall-clock budget (``--minutes`` each, timed from the
first rollout, so model loading is not charged; the update in flight when it runs out finishes),
each in ``OUT/k<k>``. Measured per run, from its own metrics:

- ``rollouts_per_hour``: rollouts that ended (trained on or not) per hour of budget;
- ``updates_per_hour``: optimizer steps per hour;
- ``engine_busy``: the fraction of the wall time with a generation in flight at the engine
  (:class:`lego.engines.metered.MeteredEngine`, measured at the proxy's side of the seam);
- ``trainer_busy``: the fraction spent in updates and weight pushes (``perf/update_s``);
- ``staleness_mean`` / ``dropped_groups``: what the asynchrony cost in policy lag;
- ``cpu_busy``: the host's CPU utilisation over the run (all cores, every process: 1 - idle and
  iowait time over elapsed CPU time, from ``/proc/stat`` through psutil).

``cpu_busy`` of ``k = 0`` bounds what any overlap can give on this machine: asynchrony changes when
work runs, not how much CPU a rollout and an update cost, so where that work is CPU-bound the
rollouts/hour of any k is at most ``1 / cpu_busy(k=0)`` times k = 0's (``cpu_ceiling`` in the report).
If k = 0 already keeps the cores 85% busy, no schedule can reach 1.3x there; with the engine and the
trainer on their own GPUs the bound is the GPUs', not the host's. The figure is host-wide, so
another job on the machine inflates it (the JSON says so).

Every figure of ``k >= 1`` is also given as a ratio to ``k = 0`` measured in the same invocation, so
the numbers compare across machines. With ``--eval`` (off by default: it multiplies the bench's
time), each run's last checkpoint is compared with the start policy best-vs-best on the held-out
tasks (:func:`lego.conductor.bench.learn_sweep.compare_policies`; the whole comparison, confirmed on
fresh samples when ``eval.confirm_samples`` > 0, is each run's ``heldout``), so a throughput gain
that costs pass@1 shows up beside it. ``OUT/async.json`` holds everything.

Caveats, written into the JSON too: a short budget gives few updates (the ratios of a 10-minute run
on 2 cores rest on a handful of steps), and on one CPU box the engine, the trainer, the harness
processes and the grader share the same two cores, so overlap is bounded by the CPU: what overlaps
here is the waiting (straggler tails, sandbox start-up, test runs), not two kinds of compute.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
import psutil

from lego.errors import ConfigError
from lego.io import atomic_write_json

__all__ = ["command", "cpu_busy", "run_bench", "summarise_run"]

CAVEATS = (
    "one wall-clock budget per k, on one machine: the figures are ratios against k=0 measured in the same "
    "invocation; few updates fit a short budget; the engine, trainer, harnesses and grader share the CPU; "
    "cpu_busy is host-wide (another job on the machine counts) and cpu_ceiling assumes the work is CPU-bound"
)


def cpu_busy(before: Any, after: Any) -> float:
    """The fraction of elapsed CPU time (all cores) that was not idle or waiting on I/O between two
    ``psutil.cpu_times()`` snapshots."""
    fields = before._fields
    total = sum(getattr(after, f) - getattr(before, f) for f in fields if f not in ("guest", "guest_nice"))
    idle = sum(getattr(after, f) - getattr(before, f) for f in ("idle", "iowait") if f in fields)
    return (total - idle) / total if total > 0 else 0.0


PEARSON = "training/rollout_actor_probs_pearson_corr"


class _BudgetSpent(Exception):
    """Raised from the step callback once the run's budget is used up."""


def summarise_run(lines: list[dict[str, Any]], closes: list[float], budget_s: float) -> dict[str, float]:
    """One run's figures from its metrics lines and the seconds (since its clock started) at which
    each step closed. Engine-busy is each step's fraction weighted by the time since the previous close."""
    wall = max(closes[-1] if closes else 0.0, budget_s) or 1.0
    ms = [ln["metrics"] for ln in lines]
    asynchronous = bool(ms) and "async/rollouts_done" in ms[-1]
    rollouts = ms[-1]["async/rollouts_done"] if asynchronous else sum(m.get("rollout/count", 0.0) for m in ms)
    busy = 0.0
    prev = 0.0
    for m, t in zip(ms, closes, strict=False):
        busy += m.get("perf/engine_busy", 0.0) * (t - prev)
        prev = t
    return {
        "updates": float(len(ms)),
        "rollouts": float(rollouts),
        "wall_s": round(wall, 1),
        "rollouts_per_hour": 3600.0 * rollouts / wall,
        "updates_per_hour": 3600.0 * len(ms) / wall,
        "engine_busy": busy / prev if prev else 0.0,
        "trainer_busy": sum(m.get("perf/update_s", 0.0) for m in ms) / wall,
        "staleness_mean": sum(m.get("training/staleness_mean", 0.0) for m in ms) / len(ms) if ms else 0.0,
        "dropped_groups": sum(m.get("async/dropped_groups", 0.0) for m in ms),
        "reward_mean": sum(m.get("reward/mean", 0.0) for m in ms) / len(ms) if ms else 0.0,
        "pearson_min": min((m[PEARSON] for m in ms if PEARSON in m), default=float("nan")),
    }


def run_bench(
    out: Path,
    minutes: float,
    staleness: list[int],
    seed: int,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    evaluate: bool = False,
    limit: int | None = None,
) -> dict[str, Any]:
    """The benchmark (module doc); returns the report also written to ``OUT/async.json``."""
    from rich.console import Console

    from lego.conductor.loop import train
    from lego.config import load_config
    from lego.io import read_jsonl

    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    budget = minutes * 60.0
    report: dict[str, Any] = {"minutes": minutes, "seed": seed, "staleness": staleness, "caveats": CAVEATS, "runs": {}}
    for k in staleness:
        cfg = load_config(
            config,
            [
                *overrides,
                f"training.out_dir={out / f'k{k}'}",
                "training.steps=100000",
                "training.checkpoint_every=1",
                "training.eval_every=0",
                f"training.seed={seed}",
                f"training.max_staleness={k}",
            ],
        )
        closes: list[float] = []
        clock: list[float] = []

        def on_step(
            step: int, metrics: dict[str, float], clock: list[float] = clock, closes: list[float] = closes
        ) -> None:
            closes.append(time.monotonic() - clock[0])
            if closes[-1] >= budget:
                raise _BudgetSpent

        cpu: list[Any] = []

        def on_start(clock: list[float] = clock, cpu: list[Any] = cpu) -> None:
            clock.append(time.monotonic())
            cpu.append(psutil.cpu_times())

        console.print(f"k={k}: lego train for {minutes:g} min (training.max_staleness={k})")
        try:
            train(cfg, console=console, on_step=on_step, on_start=on_start)
        except _BudgetSpent:
            pass
        ended = psutil.cpu_times()
        lines = read_jsonl(Path(cfg.training.out_dir) / "metrics.jsonl")
        run = summarise_run(lines, closes, budget)
        run["cpu_busy"] = cpu_busy(cpu[0], ended) if cpu else float("nan")
        report["runs"][str(k)] = run
        console.print(
            f"      {run['updates']:.0f} updates, {run['rollouts']:.0f} rollouts, engine busy {100 * run['engine_busy']:.0f}%, "
            f"trainer busy {100 * run['trainer_busy']:.0f}%, staleness {run['staleness_mean']:.2f}, "
            f"host CPU busy {100 * run['cpu_busy']:.0f}%"
        )
    base = report["runs"].get("0")
    if base:
        if base["cpu_busy"] > 0:  # the most any overlap can give where the work is CPU-bound (module doc)
            report["cpu_ceiling"] = 1.0 / base["cpu_busy"]
        for k, run in report["runs"].items():
            if k == "0":
                continue
            run["vs_k0"] = {
                f: (run[f] / base[f] if base[f] else float("inf"))
                for f in ("rollouts_per_hour", "updates_per_hour", "engine_busy", "trainer_busy", "cpu_busy")
            }
    atomic_write_json(out / "async.json", report, indent=1)  # the throughput, before the long evaluation
    if evaluate:
        _evaluate(report, out, staleness, seed, config, overrides, limit, console)
    return report


def _evaluate(
    report: dict[str, Any],
    out: Path,
    staleness: list[int],
    seed: int,
    config: str | None,
    overrides: tuple[str, ...],
    limit: int | None,
    console: Any,
) -> None:
    """Each run's last checkpoint against the start, best-vs-best on held-out tasks: one eval directory,
    each k's checkpoint under its own policy name ``k<k>``, so the start is sampled once and shared."""
    from lego.conductor.bench.learn_sweep import compare_policies
    from lego.config import load_config
    from lego.tasks.sources import load_tasks
    from lego.training.checkpoint import load_latest

    cfg = load_config(config, list(overrides))
    tasks = load_tasks(cfg.tasks.split_spec(cfg.tasks.eval_split), cfg.tasks.where, limit)
    for k in staleness:
        pick = load_latest(out / f"k{k}")
        if pick is None:
            continue
        console.print(f"k={k}: held-out best-vs-best of {pick} against the start on {len(tasks)} tasks")
        comparison, _ = compare_policies(cfg, cfg.engine.model, str(pick), tasks, out / "eval", seed, None, f"k{k}")
        report["runs"][str(k)]["heldout"] = comparison.model_dump(mode="json")
        bvb, confirmed = comparison.best_vs_best, comparison.confirmed
        fair, where = (confirmed.scored, "fresh samples") if confirmed else (bvb, "the sweep's samples")
        console.print(
            f"      held-out pass@1, start at T={bvb.before_temperature:g} vs k={k} at T={bvb.after_temperature:g}: "
            f"{fair.before:.3f} -> {fair.after:.3f}, {fair.delta:+.3f} [{fair.ci95[0]:+.3f}, {fair.ci95[1]:+.3f}], "
            f"p={fair.p_value:.3g} ({where})"
        )
        atomic_write_json(out / "async.json", report, indent=1)  # what is measured so far survives a failure


def _staleness(value: str) -> list[int]:
    try:
        ks = [int(x) for x in value.split(",") if x.strip()]
    except ValueError as exc:
        raise ConfigError(f"--staleness {value!r}: give comma-separated integers >= 0, e.g. 0,1,2") from exc
    if not ks or any(k < 0 for k in ks):
        raise ConfigError(f"--staleness {value!r}: give comma-separated integers >= 0, e.g. 0,1,2")
    return ks


@click.command("async")
@click.option("--minutes", type=float, default=10.0, show_default=True, help="Wall-clock budget of each run.")
@click.option("--staleness", default="0,1,2", show_default=True, metavar="K1,K2,...",
              help="training.max_staleness of each run; 0 (the synchronous loop) is the baseline of the ratios.")  # fmt: skip
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default="runs/bench-async",
              show_default=True)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Training seed of every run.")
@click.option("--eval/--no-eval", "evaluate", default=False, show_default=True,
              help="Also compare each run's last checkpoint with the start, best-vs-best on held-out tasks.")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True, help="Held-out tasks for --eval.")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Train config (default: the embedded default).")  # fmt: skip
@click.option("-o", "overrides", multiple=True, metavar="KEY=VALUE", help="Config override (repeatable).")
def command(
    minutes: float,
    staleness: str,
    out_dir: Path,
    seed: int,
    evaluate: bool,
    limit: int,
    config: str | None,
    overrides: tuple[str, ...],
) -> None:
    """Synchronous vs asynchronous training for the same wall-clock budget: rollouts/hour, updates/hour,
    engine-busy and trainer-busy fractions per training.max_staleness, as ratios to k=0 (JSON in --out)."""
    report = run_bench(out_dir, minutes, _staleness(staleness), seed, config, overrides, evaluate, limit)
    click.echo(json.dumps(report, indent=1))
