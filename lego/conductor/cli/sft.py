"""`lego sft [CONFIG] -o sft.KEY=VALUE`: warm-start a policy by supervised fine-tuning on lego-agent conversations.

The run is the ``[sft]`` section of the config (:class:`lego.config.SFTConfig`); each flag below is a
shortcut for one of its fields and wins over ``-o`` for the same field.
"""

from __future__ import annotations

from pathlib import Path

import click

from lego.conductor.cli.basic import flag_overrides, override_option

__all__ = ["sft"]


@click.command("sft")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@override_option("-o sft.steps=50 -o sft.source=builtin")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@click.option("--base", default=None, help="sft.base: 'tiny' (a fresh tiny model from the seed) or an HF model dir.")
@click.option("--seed", type=int, default=None, help="sft.seed: seeds the base weights, the data and the order.")
@click.option("--source", default=None, help="sft.source: task source to learn from (starter, builtin, a .jsonl).")
@click.option("--split", default=None, help="sft.split: split of that source to learn from.")
@click.option("--variants", type=int, default=None, help="sft.variants: conversations per task.")
@click.option("--limit", type=int, default=None, help="sft.limit: use only the first N tasks of the split.")
@click.option("--steps", type=int, default=None, help="sft.steps: optimizer steps.")
@click.option("--batch", type=int, default=None, help="sft.batch: examples per step.")
@click.option("--lr", type=float, default=None, help="sft.lr: peak learning rate (warmup, then cosine to 10%).")
@click.option("--max-len", type=int, default=None, help="sft.max_len: tokens kept per conversation.")
@click.option("--window", type=int, default=None, help="sft.window: N > 0: one N-token example per assistant turn.")
@click.option("--threads", type=int, default=None, help="sft.threads: torch CPU threads (0: torch's default).")
@click.option(
    "--data",
    "data_in",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Train on these conversations (JSONL from --data-out) instead of generating them.",
)
@click.option("--data-out", type=click.Path(path_type=Path), default=None, help="Also write the conversations (JSONL).")
def sft(
    config: str | None,
    overrides: tuple[str, ...],
    out_dir: Path,
    base: str | None,
    seed: int | None,
    source: str | None,
    split: str | None,
    variants: int | None,
    limit: int | None,
    steps: int | None,
    batch: int | None,
    lr: float | None,
    max_len: int | None,
    window: int | None,
    threads: int | None,
    data_out: Path | None,
    data_in: Path | None,
) -> None:
    """Fine-tune a policy on lego-agent conversations that fix tasks (loss on assistant tokens).

    \b
    The conversations come from lego.conductor.sft_data: planned from each task's gold patch and executed
    by the lego-agent's own tools on a copy of the repo, so observations are real. Same seed,
    same torch and thread count: same weights. The defaults ([sft] of `lego config show --doc`)
    rebuild the shipped warm start:
      lego sft --out lego/models/warm
      lego sft my_run.toml -o sft.steps=50 --out runs/warm
    """
    from lego.conductor.sft import run_sft
    from lego.config import load_config

    flags = {
        "sft.base": base,
        "sft.seed": seed,
        "sft.source": source,
        "sft.split": split,
        "sft.variants": variants,
        "sft.limit": limit,
        "sft.steps": steps,
        "sft.batch": batch,
        "sft.lr": lr,
        "sft.max_len": max_len,
        "sft.window": window,
        "sft.threads": threads,
    }
    cfg = load_config(config, [*overrides, *flag_overrides(flags)])
    path = run_sft(cfg.sft, out_dir, data_out=data_out, data_in=data_in)
    click.echo(str(path))
