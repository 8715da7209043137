"""`lego eval`: run the policy x harness matrix, and `lego eval report DIR` to re-render one.

How the pieces meet: the CLI loads the config (``--config FILE -o KEY=VALUE``, or a run's own
``config.toml`` with ``--from-run``; each flag is a shortcut for one config field and wins over
``-o`` for it), turns it into an :class:`EvalSpec`, loads the tasks, asks a *sample-function factory*
for ``run_sample`` and hands both to :func:`lego.eval.runner.run_eval`. The factory (``--sample-fn
MODULE:ATTR``, default :data:`DEFAULT_SAMPLE_FN`) has the signature
:class:`lego.eval.runner.SampleFnFactory`: ``factory(spec, tasks, out_dir, cfg) -> run_sample``; it is
where engines, proxy sessions, sandboxes and harnesses are built, from ``cfg``
(``lego.conductor.eval_samples`` in production).

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

from lego.conductor.cli.basic import flag_overrides, override_option
from lego.errors import ConfigError, TaskError
from lego.eval.report import markdown, render, render_dir
from lego.eval.results import EvalSpec, PolicySpec, SampleResult, read_checkpoint_meta
from lego.eval.runner import SampleFnFactory, collect_samples, run_eval
from lego.tasks.sources import load_source, select_tasks
from lego.types import Task

__all__ = ["DEFAULT_SAMPLE_FN", "check_policy_paths", "eval_group", "load_tasks", "parse_policies", "run_defaults"]

DEFAULT_SAMPLE_FN = "lego.conductor.eval_samples:eval_sample_fn"


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


BUILT_IN_MODELS = ("default", "tiny", "oracle")
"""Policy models that name no directory: the embedded default, the random tiny model, the oracle."""


def check_policy_paths(specs: list[PolicySpec], engine_kind: str) -> None:
    """Refuse, before any sample runs, a policy whose model the engine cannot load.

    The in-process engine loads only a model directory (or a built-in name; not a run directory);
    vLLM serves what its server was started with, so a hub id is left to it."""
    from lego.conductor.preflight import check_model

    for p in specs:
        if p.model in BUILT_IN_MODELS:
            continue
        if engine_kind == "vllm" and not p.model.startswith(("/", ".", "~")):
            continue
        if not Path(p.model).expanduser().is_dir():
            raise ConfigError(
                f"--policy {p.name}={p.model}: {p.model!r} is not a directory; give a model or checkpoint directory "
                f"(e.g. runs/default/checkpoints/step_000020), or one of {', '.join(BUILT_IN_MODELS)}"
            )
        check_model(p.model, f"--policy {p.name}")


def load_tasks(arg: str, limit: int | None = None, where: dict[str, list[str]] | None = None) -> list[Task]:
    """Tasks from ``SOURCE[:split]`` (``builtin``, ``builtin:heldout``, a SWE-bench JSONL file,
    ``file.jsonl:split``), with their repos ready; those ``where`` selects (``tasks.where``), the first
    ``limit`` of them."""
    try:
        source = load_source(arg)
        records = select_tasks(source.records(), where or {})
    except TaskError as exc:
        raise ConfigError(f"--tasks {arg!r}: {exc}") from exc
    if not records:
        raise ConfigError(f"--tasks {arg!r} holds no tasks" + (f" with tasks.where={where}" if where else ""))
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
    started from (``start``), in every harness it trained in (``harness.weights``' for a mixed run, else
    ``harness.name``), and the eval options the run itself used, from ``RUN_DIR/config.toml``."""
    from lego.conductor.step_plan import training_harnesses
    from lego.config import load_config
    from lego.training.checkpoint import load_latest

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
        "harnesses": tuple(training_harnesses(cfg)),
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
@click.option("--limit", type=click.IntRange(min=1), default=None, help="eval.limit: use the first N tasks.")
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

    base: dict[str, Any] = {}  # what --from-run sets, under -o and the flags
    if from_run is not None:
        if config is not None:
            raise click.UsageError(
                "give --config or --from-run RUN_DIR, not both (--from-run uses the run's config.toml)"
            )
        run = run_defaults(from_run)
        config = str(Path(from_run) / "config.toml")
        if not policies:
            policies, bases = run["policies"], bases or run["bases"]
        harnesses = tuple(dict.fromkeys([*run["harnesses"], *harnesses])) if harnesses else ()
        base = {
            "eval.harnesses": list(run["harnesses"]),
            "eval.tasks": run["tasks_arg"],
            "engine.kind": run["engine"],
            "eval.out_dir": run["out_dir"],
            "eval.temperature": run["temperature"],
        }
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
    cfg = load_config(config, [*flag_overrides(base), *overrides, *flag_overrides(flags)])
    ev = cfg.eval
    if not policies:
        raise click.UsageError(
            "give at least one --policy NAME=MODEL (harnesses: eval.harnesses or --harness), or --from-run RUN_DIR "
            "(or: lego eval report DIR)"
        )
    if len(set(ev.harnesses)) != len(ev.harnesses):
        raise ConfigError(f"eval.harnesses names a harness twice: {ev.harnesses}")
    if cfg.engine.kind == "oracle":
        raise ConfigError("engine.kind='oracle' is a policy here: pass --policy oracle and engine.kind=transformers")
    specs = parse_policies(policies, bases)
    if sample_fn == DEFAULT_SAMPLE_FN:  # a custom sample function decides itself what a policy's model names
        from lego.conductor.preflight import check_harness, check_sandbox

        check_policy_paths(specs, cfg.engine.kind)
        for name in ev.harnesses:
            check_harness(name, "--harness")
        check_sandbox(cfg.sandbox.kind, cfg.sandbox.unsafe_no_isolation)
    source = ev.tasks or f"{cfg.tasks.source}:{cfg.tasks.eval_split}"
    tasks = load_tasks(source, ev.limit, cfg.tasks.where)
    spec = EvalSpec(
        policies=specs,
        harnesses=list(ev.harnesses),
        task_ids=[t.instance_id for t in tasks],
        samples=ev.samples,
        seed=ev.seed,
        tasks_source=source,
        engine=cfg.engine.kind,
        bootstrap=ev.bootstrap,
        temperature=ev.temperature,
        max_turns=cfg.harness.max_turns,
        timeout_s=cfg.harness.timeout_s,
    )
    out_dir = ev.out_dir
    run_sample = _load_factory(sample_fn)(spec, {t.instance_id: t for t in tasks}, Path(out_dir), cfg)
    total = len(spec.keys())
    click.echo(
        f"eval: {len(spec.policies)} policies x {len(spec.harnesses)} harnesses x {len(tasks)} tasks "
        f"x {ev.samples} samples = {total} samples -> {out_dir}",
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
            spec, run_sample, out_dir, concurrency=ev.concurrency, infra_retries=ev.infra_retries, on_sample=progress
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
