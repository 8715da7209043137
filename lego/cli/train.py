"""`lego report RUN_DIR`: plots and a self-contained HTML page for a training run (the rendering
lives in :mod:`eval.train_report`; this module is also where `lego train` is defined)."""

from __future__ import annotations

import click

__all__ = ["report"]


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
    from eval.train_report import write_train_report

    click.echo(f"report: {write_train_report(run_dir, out)}")
