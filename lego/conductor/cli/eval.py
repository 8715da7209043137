"""`lego eval`: run the policy x harness matrix, and `lego eval report DIR` to re-render one.

The command parses: the config (``--config FILE -o KEY=VALUE``, or a run's own ``config.toml`` with
``--from-run``; each flag is a shortcut for one config field and wins over ``-o`` for it) and the
policies; :mod:`lego.conductor.evaluate` checks, loads the tasks and runs; the command prints the
progress and the report.

Policy names: ``--policy NAME=MODEL`` (a model dir, a checkpoint dir, or ``default``); a bare
``--policy oracle`` is the reserved oracle policy (plays gold patches). Bases: ``--base
TRAINED=BASE`` pairs a trained policy with its base for the delta and p-value; without ``--base``, a
policy named ``base`` is the base of every policy whose checkpoint has ``lego_meta.json`` with a
``trained_harness`` (see :mod:`lego.eval.matrix`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lego.conductor.cli.basic import flag_overrides, override_option
from lego.conductor.cli.main import interrupt_like_ctrl_c
from lego.conductor.evaluate import (
    DEFAULT_SAMPLE_FN,
    EvalPlan,
    SampleProgress,
    merge_from_run,
    parse_policies,
    plan_eval,
    run_plan,
)
from lego.eval.report import markdown, render, render_dir
from lego.eval.results import SampleResult

__all__ = ["eval_group"]


@click.group("eval", invoke_without_command=True)
@click.option(
    "-c",
    "--config",
    "config",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Config file (default: the shipped one). An option, not a positional CONFIG as for `lego train`: "
    "a positional would take the place of the `report` subcommand.",
)
@override_option("-o eval.samples=4 -o sandbox.kind=docker")
@click.option(
    "--policy",
    "policies",
    multiple=True,
    metavar="NAME=MODEL",
    help="A policy to evaluate (repeatable); 'oracle' is reserved.",
)
@click.option(
    "--base", "bases", multiple=True, metavar="TRAINED=BASE", help="Compare TRAINED against BASE (delta, p-value)."
)
@click.option(
    "--harness",
    "harnesses",
    multiple=True,
    metavar="NAME",
    help="eval.harnesses: a harness to evaluate in (repeatable); with --from-run, one more beside the run's own.",
)
@click.option(
    "--from-run",
    "from_run",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    metavar="RUN_DIR",
    help="Evaluate a `lego train` run with its own config.toml (engine, proxy, sandbox, harness settings): its "
    "latest checkpoint against its start model, on its held-out split, in every harness it trained in (--harness "
    "adds more), at its temperature, into RUN_DIR/eval (-o and the other flags still win).",
)
@click.option(
    "--tasks",
    "tasks_arg",
    default=None,
    metavar="SOURCE[:split]",
    help="eval.tasks (default tasks.source:tasks.eval_split).",
)
@click.option("--samples", type=click.IntRange(min=1), default=None, help="eval.samples: N samples per task and cell.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="eval.limit: the first N tasks (after tasks.where), in the source's order; a run's validation takes "
    "the same N.",
)
@click.option("--engine", type=click.Choice(["transformers", "vllm"]), default=None, help="engine.kind.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="eval.out_dir.")
@click.option("--seed", type=int, default=None, help="eval.seed: base seed; every sample's seed derives from it.")
@click.option("--temperature", type=click.FloatRange(min=0.0), default=None, help="eval.temperature.")
@click.option(
    "--max-turns", type=click.IntRange(min=1), default=None, help="harness.max_turns: turn limit per rollout."
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.0, min_open=True),
    default=None,
    help="harness.timeout_s: wall-time limit per rollout, seconds.",
)
@click.option("--concurrency", type=click.IntRange(min=1), default=None, help="eval.concurrency: samples in flight.")
@click.option("--infra-retries", type=click.IntRange(min=0), default=None, help="eval.infra_retries.")
@click.option("--bootstrap", type=click.IntRange(min=100), default=None, help="eval.bootstrap: bootstrap resamples.")
@click.option(
    "--sample-fn",
    default=DEFAULT_SAMPLE_FN,
    show_default=True,
    metavar="MODULE:ATTR",
    help="Factory (spec, tasks, out_dir) -> run_sample that performs one rollout.",
)
@click.pass_context
def eval_group(
    ctx: click.Context,
    config: str | None,
    overrides: tuple[str, ...],
    policies: tuple[str, ...],
    bases: tuple[str, ...],
    harnesses: tuple[str, ...],
    tasks_arg: str | None,
    samples: int | None,
    limit: int | None,
    engine: str | None,
    out_dir: str | None,
    seed: int | None,
    temperature: float | None,
    max_turns: int | None,
    timeout_s: float | None,
    concurrency: int | None,
    infra_retries: int | None,
    bootstrap: int | None,
    sample_fn: str,
    from_run: str | None,
) -> None:
    """Evaluate policies x harnesses over tasks: pass@1 with 95% CIs, pass@k, deltas vs base, transfer.

    \b
    Resumable: rerun the same command to finish a killed eval (finished samples are kept).
    Settings come from --config FILE (default: the shipped one) or --from-run's config.toml, then -o, then the
    flags (a flag wins over -o for the same field).
    Examples:
      lego eval --policy oracle --policy tiny=default --harness lego-agent --harness aider --samples 2
      lego eval --policy base=Qwen/Qwen3-0.6B --policy rl=runs/x/checkpoints/step_0100 --harness lego-agent
      lego eval --from-run runs/default --limit 100 --samples 4
      lego eval --from-run runs/mixed --harness aider       # a mixed run's harnesses, and aider
      lego eval -c my_eval.toml --policy rl=runs/x/checkpoints/step_0100 -o sandbox.kind=docker
      lego eval report runs/eval
    """
    if ctx.invoked_subcommand is not None:
        return
    from lego.config import load_config

    fields: dict[str, Any] = {}  # what --from-run sets, under -o and the flags
    if from_run is not None:
        if config is not None:
            raise click.UsageError(
                "give --config or --from-run RUN_DIR, not both (--from-run uses the run's config.toml)"
            )
        run = merge_from_run(from_run, policies, bases, harnesses)
        config, policies, bases, harnesses, fields = run.config, run.policies, run.bases, run.harnesses, run.fields
    flags = {
        "eval.harnesses": list(harnesses) or None,
        "eval.tasks": tasks_arg,
        "eval.samples": samples,
        "eval.limit": limit,
        "engine.kind": engine,
        "eval.out_dir": out_dir,
        "eval.seed": seed,
        "eval.temperature": temperature,
        "harness.max_turns": max_turns,
        "harness.timeout_s": timeout_s,
        "eval.concurrency": concurrency,
        "eval.infra_retries": infra_retries,
        "eval.bootstrap": bootstrap,
    }
    cfg = load_config(config, [*flag_overrides(fields), *overrides, *flag_overrides(flags)])
    if not policies:
        raise click.UsageError(
            "give at least one --policy NAME=MODEL (harnesses: eval.harnesses or --harness), or --from-run RUN_DIR "
            "(or: lego eval report DIR)"
        )
    _run_and_report(plan_eval(cfg, parse_policies(policies, bases), sample_fn))


def _run_and_report(plan: EvalPlan) -> None:
    """Run the plan under a progress bar on stderr, then print the Markdown report."""
    spec, ev = plan.spec, plan.cfg.eval
    total = len(spec.keys())
    click.echo(
        f"eval: {len(spec.policies)} policies x {len(spec.harnesses)} harnesses x {len(spec.task_ids)} tasks "
        f"x {ev.samples} samples = {total} samples -> {plan.out_dir}",
        err=True,
    )
    columns = (
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    err = Console(stderr=True)
    done = plan.samples_done()
    lines = None if err.is_terminal or done >= total else SampleProgress(total - done)  # a log shows no bar
    with Progress(*columns, console=err) as bar:
        tid = bar.add_task("samples", total=total, completed=done, last="")

        def progress(result: SampleResult) -> None:
            if lines is not None:
                lines(result)
            k = result.key
            outcome = "pass" if result.passed else f"{result.termination} ({result.cause}: {result.cause_detail})"
            bar.update(tid, advance=1, last=f"{k.policy}/{k.harness}/{k.task_id}#{k.sample}: {outcome}")

        interrupt_like_ctrl_c()
        try:
            results = run_plan(plan, on_sample=progress)
        except KeyboardInterrupt:
            bar.stop()
            saved = plan.samples_done()
            click.echo(
                f"interrupted: {saved} of {total} samples saved in {plan.out_dir}; run the same command again to "
                "continue (saved samples are kept)",
                err=True,
            )
            raise SystemExit(130) from None
    html = render(results, plan.out_dir)
    click.echo(markdown(results))
    click.echo(f"report: {html}", err=True)


@eval_group.command("report")
@click.argument("eval_dir", type=click.Path(exists=True, file_okay=False))
def report_command(eval_dir: str) -> None:
    """Re-render an eval directory (CSV, Markdown, heatmaps, HTML) from its per-sample JSON."""
    html = render_dir(eval_dir)
    click.echo((Path(eval_dir) / "report.md").read_text(encoding="utf-8"))
    click.echo(f"report: {html}", err=True)
