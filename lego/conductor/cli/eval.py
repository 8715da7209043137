"""`lego eval`: run the policy x harness matrix, and `lego eval report DIR` to re-render one.

How the pieces meet: the CLI turns options into an :class:`EvalSpec`, loads the tasks, asks a
*sample-function factory* for ``run_sample`` and hands both to :func:`lego.eval.runner.run_eval`.
The factory (``--sample-fn MODULE:ATTR``, default :data:`DEFAULT_SAMPLE_FN`) has the signature
:class:`lego.eval.runner.SampleFnFactory`: ``factory(spec, tasks, out_dir) -> run_sample``; it is where
engines, proxy sessions, sandboxes and harnesses are built (``lego.conductor.rollout`` in production).

Policy names: ``--policy NAME=MODEL`` (a model dir, a checkpoint dir, or ``default``); a bare
``--policy oracle`` is the reserved oracle policy (plays gold patches). Bases: ``--base
TRAINED=BASE`` pairs a trained policy with its base for the delta and p-value; without ``--base``, a
policy named ``base`` is the base of every policy whose checkpoint has ``lego_meta.json`` with a
``trained_harness`` (see :mod:`lego.eval.matrix`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lego.errors import ConfigError, TaskError
from lego.eval.report import markdown, render, render_dir
from lego.eval.results import EvalSpec, PolicySpec, SampleResult, read_checkpoint_meta
from lego.eval.runner import SampleFnFactory, collect_samples, run_eval
from lego.sandboxes.tasks.sources import load_source
from lego.types import Task

__all__ = ["DEFAULT_SAMPLE_FN", "eval_group", "load_tasks", "parse_policies", "run_defaults"]

DEFAULT_SAMPLE_FN = "lego.conductor.rollout:eval_sample_fn"


def parse_policies(values: tuple[str, ...], bases: tuple[str, ...]) -> list[PolicySpec]:
    """``NAME=MODEL`` options (and ``TRAINED=BASE`` pairs) -> policy specs, metadata read from checkpoints."""
    specs: list[PolicySpec] = []
    for v in values:
        name, sep, model = v.partition("=")
        if not sep:
            name, model = (v, v) if v == "oracle" else (Path(v).name or v, v)
        if not name or not model:
            raise ConfigError(f"--policy {v!r}: expected NAME=MODEL_OR_CHECKPOINT, e.g. --policy base=Qwen/Qwen3-0.6B")
        if any(p.name == name for p in specs):
            raise ConfigError(f"--policy name {name!r} given twice; names must be unique")
        meta = read_checkpoint_meta(model) if model != "oracle" else None
        specs.append(PolicySpec(name=name, model=model, trained_harness=meta.trained_harness if meta else None))
    names = [p.name for p in specs]
    for b in bases:
        trained, sep, base = b.partition("=")
        if not sep or trained not in names or base not in names or trained == base:
            raise ConfigError(
                f"--base {b!r}: expected TRAINED=BASE naming two different --policy names ({', '.join(names)})"
            )
        specs[names.index(trained)].base = base
    return specs


def load_tasks(arg: str, limit: int | None = None) -> list[Task]:
    """Tasks from ``SOURCE[:split]`` (``builtin``, ``builtin:heldout``, a SWE-bench JSONL file,
    ``file.jsonl:split``), with their repos ready; the first ``limit`` of them."""
    try:
        source = load_source(arg)
        records = source.records()
    except TaskError as exc:
        raise ConfigError(f"--tasks {arg!r}: {exc}") from exc
    if not records:
        raise ConfigError(f"--tasks {arg!r} holds no tasks")
    records = records[:limit] if limit else records
    return [source.materialize(t) for t in records]


def _load_factory(target: str) -> SampleFnFactory:
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise ConfigError(f"--sample-fn {target!r}: expected MODULE:ATTR")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"--sample-fn {target!r} cannot be loaded ({exc}); the rollout that runs eval samples lives there"
        ) from exc
    return factory  # type: ignore[no-any-return]


def run_defaults(run_dir: str | Path) -> dict[str, Any]:
    """What ``--from-run RUN_DIR`` sets: the run's latest checkpoint (``trained``) against the model it
    started from (``start``), and the eval options the run itself used, from ``RUN_DIR/config.toml``."""
    from lego.conductor.checkpoint import load_latest
    from lego.config import load_config

    root = Path(run_dir)
    if not (root / "config.toml").exists():
        raise ConfigError(
            f"--from-run {run_dir}: no config.toml there; give the out_dir of a `lego train` run (e.g. runs/default)"
        )
    cfg = load_config(root / "config.toml")
    latest = load_latest(root)
    if latest is None:
        raise ConfigError(f"--from-run {run_dir}: the run has no complete checkpoint yet; train at least one step")
    return {
        "policies": ("start=" + cfg.engine.model, f"trained={latest}"),
        "bases": ("trained=start",),
        "harnesses": (cfg.harness.name,),
        "tasks_arg": f"{cfg.tasks.source}:{cfg.tasks.eval_split}",
        "engine": cfg.engine.kind if cfg.engine.kind in ("transformers", "vllm") else "transformers",
        "out_dir": str(root / "eval"),
        "temperature": cfg.algorithm.temperature,
        "max_turns": cfg.harness.max_turns,
        "timeout_s": cfg.harness.timeout_s,
        "concurrency": cfg.eval.concurrency,
    }


@click.group("eval", invoke_without_command=True)
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
@click.option("--harness", "harnesses", multiple=True, metavar="NAME", help="A harness to evaluate in (repeatable).")
@click.option(
    "--from-run",
    "from_run",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    metavar="RUN_DIR",
    help="Evaluate a `lego train` run: its latest checkpoint against its start model, on its held-out split, "
    "in its harness, at its temperature, turn limit, timeout and eval concurrency, into RUN_DIR/eval (any option given wins).",
)
@click.option("--tasks", "tasks_arg", default="builtin:heldout", show_default=True, metavar="SOURCE[:split]")
@click.option(
    "--samples", type=click.IntRange(min=1), default=2, show_default=True, help="N samples per task and cell."
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Use the first N_TASKS tasks.")
@click.option("--engine", type=click.Choice(["transformers", "vllm"]), default="transformers", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="runs/eval", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Base seed; every sample's seed derives from it.")
@click.option("--temperature", type=click.FloatRange(min=0.0), default=1.0, show_default=True)
@click.option("--max-turns", type=click.IntRange(min=1), default=30, show_default=True, help="Turn limit per rollout.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.0, min_open=True),
    default=600.0,
    show_default=True,
    help="Wall-time limit per rollout, seconds.",
)
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True, help="Samples in flight.")
@click.option("--infra-retries", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--bootstrap", type=click.IntRange(min=100), default=2000, show_default=True, help="Bootstrap resamples.")
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
    policies: tuple[str, ...],
    bases: tuple[str, ...],
    harnesses: tuple[str, ...],
    tasks_arg: str,
    samples: int,
    limit: int | None,
    engine: str,
    out_dir: str,
    seed: int,
    temperature: float,
    max_turns: int,
    timeout_s: float,
    concurrency: int,
    infra_retries: int,
    bootstrap: int,
    sample_fn: str,
    from_run: str | None,
) -> None:
    """Evaluate policies x harnesses over tasks: pass@1 with 95% CIs, pass@k, deltas vs base, transfer.

    \b
    Resumable: rerun the same command to finish a killed eval (finished samples are kept).
    Examples:
      lego eval --policy oracle --policy tiny=default --harness lego-agent --harness aider --samples 2
      lego eval --policy base=Qwen/Qwen3-0.6B --policy rl=runs/x/checkpoints/step_0100 --harness lego-agent
      lego eval --from-run runs/default --limit 100 --samples 4
      lego eval report runs/eval
    """
    if ctx.invoked_subcommand is not None:
        return
    if from_run is not None:
        given = {k for k in ctx.params if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT}
        run = run_defaults(from_run)
        if not policies:
            policies, bases = run["policies"], bases or run["bases"]
        picked = {k: v for k, v in run.items() if k not in given}
        harnesses = picked.get("harnesses", harnesses)
        tasks_arg = picked.get("tasks_arg", tasks_arg)
        engine = picked.get("engine", engine)
        out_dir = picked.get("out_dir", out_dir)
        temperature = picked.get("temperature", temperature)
        max_turns = picked.get("max_turns", max_turns)
        timeout_s = picked.get("timeout_s", timeout_s)
        concurrency = picked.get("concurrency", concurrency)
    if not policies or not harnesses:
        raise click.UsageError(
            "give at least one --policy NAME=MODEL and one --harness NAME, or --from-run RUN_DIR "
            "(or: lego eval report DIR)"
        )
    if len(set(harnesses)) != len(harnesses):
        raise ConfigError(f"--harness given twice: {list(harnesses)}")
    tasks = load_tasks(tasks_arg, limit)
    spec = EvalSpec(
        policies=parse_policies(policies, bases),
        harnesses=list(harnesses),
        task_ids=[t.instance_id for t in tasks],
        samples=samples,
        seed=seed,
        tasks_source=tasks_arg,
        engine=engine,
        bootstrap=bootstrap,
        temperature=temperature,
        max_turns=max_turns,
        timeout_s=timeout_s,
    )
    run_sample = _load_factory(sample_fn)(spec, {t.instance_id: t for t in tasks}, Path(out_dir))
    total = len(spec.keys())
    click.echo(
        f"eval: {len(spec.policies)} policies x {len(spec.harnesses)} harnesses x {len(tasks)} tasks "
        f"x {samples} samples = {total} samples -> {out_dir}",
        err=True,
    )
    columns = (
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        done_before = len(collect_samples(out_dir, spec)) if Path(out_dir, "spec.json").exists() else 0
        tid = bar.add_task("samples", total=total, completed=done_before, last="")

        def progress(result: SampleResult) -> None:
            k = result.key
            outcome = "pass" if result.passed else f"{result.termination} ({result.cause}: {result.cause_detail})"
            last = f"{k.policy}/{k.harness}/{k.task_id}#{k.sample}: {outcome}"
            bar.update(tid, advance=1, last=last)

        results = run_eval(
            spec, run_sample, out_dir, concurrency=concurrency, infra_retries=infra_retries, on_sample=progress
        )
    html = render(results, out_dir)
    click.echo(markdown(results))
    click.echo(f"report: {html}", err=True)


@eval_group.command("report")
@click.argument("eval_dir", type=click.Path(exists=True, file_okay=False))
def report_command(eval_dir: str) -> None:
    """Re-render an eval directory (CSV, Markdown, heatmaps, HTML) from its per-sample JSON."""
    html = render_dir(eval_dir)
    click.echo((Path(eval_dir) / "report.md").read_text(encoding="utf-8"))
    click.echo(f"report: {html}", err=True)
