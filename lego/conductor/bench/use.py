"""`lego bench use`: does learning from use -- `lego serve --learn` fed by a person's replies -- make the policy better?

The experiment of learning from use, end to end on this machine, with no hidden test in training:

1. the start policy (``engine.model``) on the held-out tasks over ``eval.temperatures``, then its
   confirm samples at its best temperature (as `lego bench learn`; into ``OUT/eval``, reused when
   there);
2. ``lego serve --learn`` in-process (its store and learner under ``OUT/serve``, the judge
   ``serve.judge``, the signal ``--signal``), and for ``--minutes`` a simulated person
   (:mod:`lego.conductor.simulated_use`) works through the *training* split's tasks with each
   ``--harness`` in turn, ``--concurrency`` sessions at once: the task's tests visible in their repo,
   the agent asked for the fix, the person running the tests when it is done and answering in the same
   conversation (re-query with the failures, or thanks), up to ``--rounds`` re-queries. The learner
   trains on what the judge makes of those next states, while serving goes on; the sessions in
   flight at the budget finish, the learner's pass in flight too;
3. the learner's newest checkpoint against the start, best-vs-best on fresh samples (paired
   bootstrap CI, permutation p-value), every same-temperature delta and pass@k, exactly as
   `lego bench learn` scores `lego train` (:func:`lego.conductor.bench.learn.compare_to_start`).

``OUT/use.json`` holds every number (the sessions: how many, how many ended green, per quarter of
the budget and per harness; the learner's steps with their mean score, baseline, fidelity and wall time, and its
held-out checks; the judge's verdict counts), ``OUT/use.png`` the plots, ``OUT/sessions.jsonl``
each session. Run it once per ``--signal`` into different ``--out`` directories with one
``--eval-seed``, the later ones with ``--start-from`` the first's ``--out`` to reuse the start's samples.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from lego.errors import ConfigError
from lego.io import append_jsonl, atomic_write_json

__all__ = ["command", "run_use_bench"]


def _quarters(records: list[dict[str, Any]], budget_s: float) -> list[dict[str, Any]]:
    """Sessions and their green share in each quarter of the budget (by when they started)."""
    out = []
    for q in range(4):
        lo, hi = q * budget_s / 4, (q + 1) * budget_s / 4
        inside = [r for r in records if lo <= r["started_s"] < hi or (q == 3 and r["started_s"] >= hi)]
        green = sum(1 for r in inside if r["green"])
        out.append({"quarter": q + 1, "sessions": len(inside), "green": green,
                    "green_share": green / len(inside) if inside else None})  # fmt: skip
    return out


def _per_harness(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each harness's sessions: how many, how many ended green, how many ended before the person could
    answer (``unheard``: the harness exited on its own), and the seconds they took together."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        row = out.setdefault(r["harness"], {"sessions": 0, "green": 0, "unheard": 0, "session_s": 0.0})
        row["sessions"] += 1
        row["green"] += int(bool(r["green"]))
        row["unheard"] += int(bool(r.get("unheard")))
        row["session_s"] = round(row["session_s"] + r["wall_s"], 1)
    return out


def run_use_bench(
    out: Path,
    minutes: float,
    limit: int | None,
    seed: int,
    *,
    signal: str = "reward",
    harnesses: tuple[str, ...] = ("lego-agent",),
    concurrency: int = 4,
    rounds: int = 2,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    eval_seed: int | None = None,
    factory: Any = None,
) -> dict[str, Any]:
    """The whole experiment (see the module doc); returns the report also written to ``use.json``.
    ``factory`` replaces the production sample function of the held-out sweeps (tests)."""
    from rich.console import Console

    from lego.conductor.bench.learn import compare_to_start, report_head, sweep_start
    from lego.conductor.bench.learn_plot import plot_learn
    from lego.conductor.preflight import check_serve_learn
    from lego.config import load_config
    from lego.tasks.sources import load_tasks

    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    eval_seed = seed if eval_seed is None else eval_seed
    cfg = load_config(
        config,
        [
            *overrides,
            f"serve.dir={out / 'serve'}",
            "serve.learn=true",
            f"serve.learn_signal={signal}",
            f"training.seed={seed}",
        ],
    )
    check_serve_learn(cfg)  # a held-out check of the learner (serve.learn_heldout): before any compute
    held_out = load_tasks(cfg.tasks.split_spec(cfg.tasks.eval_split), cfg.tasks.where, limit)
    train_tasks = load_tasks(cfg.tasks.split_spec(cfg.tasks.split), cfg.tasks.where, cfg.tasks.limit)
    report = report_head(cfg, minutes, len(held_out), seed, eval_seed)
    report.update(signal=signal, harnesses=list(harnesses), concurrency=concurrency, rounds=rounds,
                  judge=cfg.serve.judge, learn_batch=cfg.serve.learn_batch, train_tasks=len(train_tasks))  # fmt: skip
    t0 = time.monotonic()
    sweep_start(cfg, held_out, out, eval_seed, factory, console, report)

    console.print(
        f"[2/3] lego serve --learn ({signal}) for {minutes:g} min: a simulated person on {len(train_tasks)} "
        f"training tasks with {', '.join(harnesses)}, {concurrency} sessions at once (the sessions in flight finish)"
    )
    use = _simulated_use(cfg, out, minutes, harnesses, concurrency, rounds, train_tasks, console)
    report.update(use)
    pick = use.get("checkpoint")
    if pick:
        console.print(f"[3/3] the learner's step {report['steps']} ({pick}) at the same temperatures")
        compare_to_start(cfg, cfg.engine.model, Path(pick), held_out, out, eval_seed, factory, console, report)
    report["total_s"] = round(time.monotonic() - t0, 1)
    plot_learn({**report, "train_temperature": cfg.algorithm.temperature}, out / "use.png")
    atomic_write_json(out / "use.json", report, indent=1)
    return report


def _simulated_use(
    cfg: Any,
    out: Path,
    minutes: float,
    harnesses: tuple[str, ...],
    concurrency: int,
    rounds: int,
    tasks: list[Any],
    console: Any,
) -> dict[str, Any]:
    """Phase 2: serve with the learner on, drive the simulated sessions for ``minutes``, stop; the numbers."""
    import gc

    from lego.conductor.serve_learner import ServeLearner
    from lego.conductor.simulated_use import SessionRecord, UseDriver
    from lego.engines import build_engine
    from lego.io import read_jsonl
    from lego.learn.server import LearnServer
    from lego.learn.store import SqliteStore
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model
    from lego.training.checkpoint import load_latest

    ecfg = cfg.engine
    engine = build_engine(ecfg)
    chat_format = ChatFormat.from_pretrained(resolve_model(ecfg.model), ecfg.chat_template, ecfg.tool_parser)
    server = LearnServer(engine, chat_format, cfg.proxy, cfg.serve)
    sessions_file = out / "sessions.jsonl"
    records: list[dict[str, Any]] = []
    t_use = time.monotonic()

    def on_step(line: dict[str, Any]) -> None:
        if "learner/stopped" in line:
            console.print(f"      learner stopped: {line['learner/stopped']}")
            return
        if "heldout/pass1" in line:
            console.print(
                f"      held-out check at step {line['heldout/step']}: pass@1 {line['heldout/pass1']:.3f} "
                f"(start {line['heldout/reference']:.3f})"
            )
            return
        console.print(
            f"      learner step {line['step']}: {line['learner/turns']} turns, score "
            f"{line['learner/score_mean']:+.2f} - baseline {line['learner/baseline']:+.2f}, pearson "
            f"{line.get('training/rollout_actor_probs_pearson_corr', float('nan')):.4f}, {line['learner/step_s']:.0f}s"
        )

    def on_session(rec: SessionRecord) -> None:
        row = {**rec.to_json(), "started_s": round(time.monotonic() - t_use - rec.wall_s, 1)}
        records.append(row)
        append_jsonl(sessions_file, row)
        green = sum(1 for r in records if r["green"])
        console.print(
            f"      session {len(records)}: {rec.task} {'green' if rec.green else 'red'} after {rec.attempts} "
            f"attempt(s), {rec.wall_s:.0f}s{' ' + rec.error if rec.error else ''} | green so far {green}/{len(records)}"
        )

    learner = ServeLearner.build(cfg, server, engine, chat_format, on_step=on_step)
    learner.resume()
    server.start()
    learner.start()
    try:
        with UseDriver(cfg, server, rounds=rounds) as drive:
            drive.sessions(tasks, harnesses, minutes=minutes, concurrency=concurrency, on_session=on_session)
    finally:
        learner.stop()
        server.stop()
    use_s = time.monotonic() - t_use
    lines = read_jsonl(learner.dir / "metrics.jsonl") if (learner.dir / "metrics.jsonl").is_file() else []
    steps = [s for s in lines if "step" in s]
    checks = [{"step": c["heldout/step"], "pass1": c["heldout/pass1"]} for c in lines if "heldout/pass1" in c]
    store = SqliteStore(server.dir / "learn.db")  # the server closed its own
    verdicts: dict[str, int] = {}
    rules: dict[str, int] = {}
    for v in store.verdicts(judge=learner.judge.name):
        verdicts[v.status] = verdicts.get(v.status, 0) + 1
        for r in v.rules:
            rules[r] = rules.get(r, 0) + 1
    marks: dict[str, int] = {}
    for _, (_, outcome) in store.learned().items():
        marks[outcome] = marks.get(outcome, 0) + 1
    turns = sum(1 for _ in store.iter_turns())
    store.close()
    latest = load_latest(learner.dir)
    pearsons = [s.get("training/rollout_actor_probs_pearson_corr") for s in steps]
    result = {
        "use_s": round(use_s, 1),
        "sessions": len(records),
        "sessions_green": sum(1 for r in records if r["green"]),
        "sessions_failed_to_run": sum(1 for r in records if r["error"]),
        "session_quarters": _quarters(records, minutes * 60.0),
        "per_harness": _per_harness(records),
        "turns": turns,
        "verdicts": verdicts,
        "rules": rules,
        "learned": marks,
        "learner_error": learner.error,
        "heldout_checks": checks,
        "steps": len(steps),
        "checkpoint": str(latest) if latest is not None else None,
        "pearson_min": min((p for p in pearsons if p is not None), default=None),
        "per_step": [
            {
                "step": s["step"],
                "reward": s.get("learner/score_mean"),
                "baseline": s.get("learner/baseline"),
                "pearson": s.get("training/rollout_actor_probs_pearson_corr"),
                "turns": s.get("learner/turns"),
                "wall_s": s.get("learner/step_s"),
            }
            for s in steps
        ],
    }
    del engine, learner, server
    gc.collect()
    return result


@click.command("use")
@click.option("--minutes", type=float, default=30.0, show_default=True,
              help="How long the simulated person works with `lego serve --learn` (the sessions in flight finish).")  # fmt: skip
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default="runs/bench-use",
              show_default=True)  # fmt: skip
@click.option("--signal", type=click.Choice(["reward", "opd", "both"]), default="reward", show_default=True,
              help="serve.learn_signal: the judge's score, hindsight distillation, or both.")  # fmt: skip
@click.option("--harness", "harnesses", multiple=True, default=("lego-agent",), show_default=True,
              help="A harness the person uses (repeatable: sessions take them in turn); it must take a reply.")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True, help="Sessions at once.")
@click.option("--rounds", type=click.IntRange(min=0), default=2, show_default=True,
              help="Re-queries the person makes after the first attempt before giving up.")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True, help="Held-out tasks evaluated.")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="eval.sweep_samples (default 2).")
@click.option("--confirm-samples", type=click.IntRange(min=0), default=None, help="eval.confirm_samples (default 8).")
@click.option("--temperatures", default=None, metavar="T1,T2,...", help="eval.temperatures (default 0.6,0.8,1.0,1.2).")
@click.option("--seed", type=int, default=0, show_default=True, help="Training seed (and eval seed by default).")
@click.option("--eval-seed", type=int, default=None, help="Eval base seed (default: --seed).")
@click.option("--start-from", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The --out of an earlier run with the same --eval-seed: its start-policy samples are copied "
              "into this --out (a fresh one), so the start is not sampled again.")  # fmt: skip
@click.option(
    "--config", type=click.Path(exists=True, dir_okay=False), default=None, help="Config (default: embedded)."
)
@click.option("-o", "overrides", multiple=True, metavar="KEY=VALUE", help="Config override (repeatable).")
def command(
    minutes: float,
    out_dir: Path,
    signal: str,
    harnesses: tuple[str, ...],
    concurrency: int,
    rounds: int,
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
    """Held-out pass@1 of the start and of what `lego serve --learn` learned from a simulated person's
    replies (visible tests, re-query or thanks; no hidden test in training), best-vs-best with CIs
    (JSON + PNG in --out)."""
    from lego.conductor.bench.learn import _temperatures, copy_start
    from lego.harnesses.base import get_harness
    from lego.seams import Conversing

    if minutes <= 0:
        raise click.BadParameter(
            f"{minutes:g}: give the minutes the person works, e.g. --minutes 30", param_hint="--minutes"
        )
    for name in harnesses:
        try:
            adapter = get_harness(name)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--harness") from exc
        if not isinstance(adapter, Conversing):
            raise click.BadParameter(
                f"{name!r} cannot take the person's reply after it finishes (no resume, no prompt of its own): "
                "use lego-agent or mini-swe-agent",
                param_hint="--harness",
            )
    if start_from is not None:
        copy_start(start_from, out_dir)
    extra = [
        *_temperatures(temperatures),
        *([f"eval.sweep_samples={samples}"] if samples is not None else []),
        *([f"eval.confirm_samples={confirm_samples}"] if confirm_samples is not None else []),
    ]
    report = run_use_bench(out_dir, minutes, limit, seed, signal=signal, harnesses=harnesses,
                           concurrency=concurrency, rounds=rounds, config=config,
                           overrides=(*overrides, *extra), eval_seed=eval_seed)  # fmt: skip
    click.echo(json.dumps({k: v for k, v in report.items() if k != "per_step"}, indent=1))
