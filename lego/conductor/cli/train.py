"""`lego report RUN_DIR`: plots and a self-contained HTML page for a training run (the rendering
lives in :mod:`lego.eval.train_report`; this module is also where `lego train` is defined)."""

from __future__ import annotations

import os
import shlex
import sys
from typing import NoReturn

import click

from lego.conductor.cli.basic import override_option
from lego.conductor.cli.main import interrupt_like_ctrl_c, invoked_as

__all__ = ["report", "train"]


@click.command("train")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--resume", is_flag=True, help="Continue the run in training.out_dir after its last checkpoint.")
@override_option("-o training.steps=3 -o training.out_dir=runs/a")
@click.option(
    "--unsafe-no-isolation",
    is_flag=True,
    help="Run agents without bubblewrap (only on a disposable machine; same as -o sandbox.unsafe_no_isolation=true).",
)
def train(config: str | None, resume: bool, overrides: tuple[str, ...], unsafe_no_isolation: bool) -> None:
    """Run GSPO in an unmodified harness: B tasks x G rollouts per step, graded by hidden tests.

    \b
    Without CONFIG it runs the shipped embedded default: the small policy lego builds itself
    (CPU is enough), the starter suite's train split, the lego-agent harness, local bubblewrap sandboxes.
    Each step prints one line: reward, pass rate, rollout-train Pearson, KL, clip fraction, tokens/s.

    \b
    Writes training.out_dir/: config.toml, metrics.jsonl, trajectories/step_NNNN/*.json,
    checkpoints/ (each a loadable model dir). A killed run continues with --resume; no step is
    lost or done twice. `lego report RUN_DIR` draws the plots and the HTML report.

    \b
    Examples:
      lego train
      lego train -o training.steps=3 -o training.out_dir=runs/smoke
      lego train my_run.toml --resume
    """
    from lego.conductor.preflight import check_train
    from lego.config import load_config

    extra = ["sandbox.unsafe_no_isolation=true"] if unsafe_no_isolation else []
    cfg = load_config(config, [*overrides, *extra])
    check_train(cfg)  # a mistake is one line and exit 2 here, before anything loads

    from lego.conductor.loop import TrainingInterrupted
    from lego.conductor.loop import train as run_train
    from lego.errors import RankFailedError

    lego = invoked_as()  # as typed: `.venv/bin/lego` after the README's set-up is not on PATH
    flags = _same_flags(config, overrides) + (" --unsafe-no-isolation" if unsafe_no_isolation else "")
    interrupt_like_ctrl_c()
    try:
        run = run_train(cfg, resume=resume)
    except RankFailedError as lost:
        click.secho(f"error: RankFailedError: {lost}", fg="red", err=True)
        click.echo(f"continue with `{lego} train --resume{flags}`", err=True)
        _leave(1)
    except TrainingInterrupted as stop:
        if stop.saved_step:
            click.echo(f"saved step {stop.saved_step}; continue with `{lego} train --resume`{flags}")
        else:
            click.echo(f"no step finished, nothing saved; start again with `{lego} train`{flags}")
        _leave(130)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, the followers have nothing to report
        click.echo(f"run: {run.root}  (lego report {run.root})")


def _leave(code: int) -> NoReturn:
    """Exit at once: rollout threads may still be draining a closed proxy, and the interpreter would
    join them at exit. Their sandboxes die with this process (bwrap --die-with-parent)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _same_flags(config: str | None, overrides: tuple[str, ...]) -> str:
    """The config and -o flags of this command, to repeat after --resume (the run's out_dir is among them)."""
    parts = ([config] if config else []) + [f"-o {o}" for o in overrides]
    return "".join(f" {shlex.quote(p) if not p.startswith('-o ') else '-o ' + shlex.quote(p[3:])}" for p in parts)


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write the HTML page (default: RUN_DIR/report.html); plots go beside it.",
)
def report(run_dir: str, out: str | None) -> None:
    """Write PNG plots and a self-contained HTML report of RUN_DIR's metrics.jsonl and trajectories:
    reward and pass rate, fidelity, clip fraction, KL, entropy, lengths, termination labels, guard
    flags, and the per-harness breakdown."""
    from lego.eval.train_report import write_train_report

    click.echo(f"report: {write_train_report(run_dir, out)}")
