"""`lego run`: one rollout end to end (sandbox → proxy session → harness → grade), for trying a
harness, a policy or a task by hand."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lego.conductor.cli.basic import override_option

if TYPE_CHECKING:
    from lego.config import LegoConfig
    from lego.types import Trajectory

__all__ = ["cut_turns", "run"]

HELD_GUARDS = ("egress_blocked", "history_strip")
"""Guard flags that say a protection held (lego.sandboxes.guards); every other flag is a detection."""


def cut_turns(traj: Trajectory, budget: int) -> int:
    """How many of the trajectory's model turns sampled ``budget`` tokens, i.e. were cut at max_tokens.

    A turn that ends by itself samples its end-of-turn token inside the budget, so a run of exactly
    ``budget`` sampled tokens is a turn the engine stopped."""
    return sum(
        1
        for seg in traj.segments
        for sampled, run in itertools.groupby(seg.response_mask)
        if sampled and len(list(run)) >= budget
    )


def _turn_budget(cfg: LegoConfig, harness: str) -> int:
    """The completion budget a turn of ``harness`` gets: lego-agent asks for its own; others get the proxy's."""
    from lego.config import LegoAgentOptions

    opts = cfg.harness.options.get(harness)
    budget = opts.max_tokens if isinstance(opts, LegoAgentOptions) else cfg.proxy.default_max_tokens
    return min(budget, cfg.proxy.max_tokens_cap) if cfg.proxy.max_tokens_cap else budget


@click.command("run")
@click.option(
    "--harness",
    "harness_name",
    default="lego-agent",
    show_default=True,
    help="Registered harness (`lego harness list`); third-party ones need `lego harness install NAME`.",
)
@click.option(
    "--engine",
    "engine_kind",
    type=click.Choice(["oracle", "transformers", "vllm"]),
    default="transformers",
    show_default=True,
    help="oracle plays the task's gold patch through the harness's own tools (proves "
    "integration; its tokens are scored by --model so logprobs are real).",
)
@click.option("--task", "task_id", required=True, help="Task id, e.g. one printed by `lego tasks list builtin`.")
@click.option(
    "--tasks",
    "source",
    default="builtin",
    show_default=True,
    help="Where the task lives: builtin, builtin:heldout, or a SWE-bench JSONL file.",
)
@click.option(
    "--model",
    default="default",
    show_default=True,
    help="Model directory (HF layout) or 'default' (the embedded default policy).",
)
@click.option("--vllm-url", default=None, help="Base URL of `vllm serve` for --engine vllm.")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--max-turns", type=int, default=30, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Harness wall time, seconds."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write the trajectory JSON (default: runs/run-<task>-<harness>.json).",
)
@click.option("--unsafe-no-isolation", is_flag=True, help="Run without bubblewrap (disposable machines only).")
@override_option("-o harness.options={lego-agent={max_tokens=256}}")
def run(
    harness_name: str,
    engine_kind: str,
    task_id: str,
    source: str,
    model: str,
    vllm_url: str | None,
    temperature: float,
    max_turns: int,
    timeout_s: float,
    seed: int,
    out: str | None,
    unsafe_no_isolation: bool,
    overrides: tuple[str, ...],
) -> None:
    """Run ONE rollout and print its reward, termination label, segments and trajectory path.

    \b
    Examples:
      lego run --harness lego-agent --engine oracle --task lego-builtin__roman-0001
      lego run --harness mini-swe-agent --engine transformers --task lego-builtin__roman-0001 --max-turns 5
    """
    from lego.conductor.eval_samples import ORACLE_MAX_TOKENS
    from lego.conductor.preflight import check_harness, check_model, check_sandbox
    from lego.config import load_config
    from lego.tasks.sources import load_source

    extra = [f"engine.kind={engine_kind}", f"engine.model={model}"]
    if engine_kind == "oracle":
        # Room for the oracle's one-call patches (see ORACLE_MAX_TOKENS); an explicit -o below still wins.
        extra.append(f"harness.options.lego-agent.max_tokens={ORACLE_MAX_TOKENS}")
    if vllm_url:
        extra.append(f"engine.vllm_url={vllm_url}")
    if unsafe_no_isolation:
        extra.append("sandbox.unsafe_no_isolation=true")
    cfg = load_config(None, [*extra, *overrides])
    # Before anything loads: a mistake is one line and exit 2 (a TaskError names the task and where to look).
    check_harness(harness_name, "--harness")
    if engine_kind != "vllm":
        check_model(cfg.engine.model, "--model")
    check_sandbox(cfg.sandbox.kind, cfg.sandbox.unsafe_no_isolation)
    task = load_source(source).get(task_id)

    from lego.conductor.rollout import RolloutOptions, RolloutRunner, ServedPolicy
    from lego.io import atomic_write_text

    policy = ServedPolicy.start(cfg.engine, cfg.proxy, name=engine_kind)
    try:
        runner = RolloutRunner(cfg, policy)
        traj = runner.run(
            task,
            harness_name,
            RolloutOptions(
                override_sampling=True, temperature=temperature, seed=seed, max_turns=max_turns, timeout_s=timeout_s
            ),
        )
    finally:
        policy.close()
    path = Path(out) if out else Path("runs") / f"run-{task_id}-{harness_name}.json"
    atomic_write_text(path, traj.model_dump_json(indent=1))
    _print_outcome(traj, cfg, task_id, harness_name, path)


def _print_outcome(traj: Trajectory, cfg: LegoConfig, task_id: str, harness_name: str, path: Path) -> None:
    """The rollout's verdict, tests, segments, truncation and guard flags, one labelled line each."""
    sampled = [s.num_sampled for s in traj.segments]
    click.echo(f"task        {task_id}")
    click.echo(f"harness     {harness_name} {traj.harness_version}")
    click.echo(f"termination {traj.termination} ({traj.cause}: {traj.cause_detail})")
    click.echo(f"reward      {traj.reward}")
    if traj.grade is not None:
        failed = sorted(t for t, r in traj.grade.tests.items() if r != "passed")
        click.echo(
            f"tests       {len(traj.grade.tests) - len(failed)}/{len(traj.grade.tests)} passed"
            + (f"; failing: {', '.join(failed[:5])}" if failed else "")
        )
    click.echo(f"segments    {len(traj.segments)} (sampled tokens per segment: {sampled})")
    budget = _turn_budget(cfg, harness_name)
    cut = cut_turns(traj, budget)
    if cut:
        click.echo(
            f"truncated   {cut} completion(s) cut at max_tokens={budget}; raise it with "
            f"-o harness.options.{harness_name}.max_tokens=N"
            if harness_name in cfg.harness.options
            else f"truncated   {cut} completion(s) cut at max_tokens={budget}; raise proxy.max_tokens_cap "
            "or proxy.default_max_tokens with -o"
        )
    flags = sorted(k for k, v in traj.guard_flags.items() if v)
    held = [f for f in flags if f in HELD_GUARDS]
    detected = [f for f in flags if f not in HELD_GUARDS]
    click.echo(
        f"guards      protections held: {', '.join(held) or 'none'}; detected: {', '.join(detected) or 'nothing'}"
        "  (README: 'What the guard flags mean')"
    )
    if traj.metadata.get("zeroed_by"):
        click.echo(f"zeroed by   {', '.join(traj.metadata['zeroed_by'])}")
    if traj.metadata.get("error"):
        click.echo(f"error       {str(traj.metadata['error'])[-800:]}")
    click.echo(f"trajectory  {path}")
