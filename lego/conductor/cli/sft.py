"""`lego sft`: warm-start a policy by supervised fine-tuning on lego-agent conversations."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["sft"]


@click.command("sft")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@click.option(
    "--base", default="tiny", show_default=True, help="'tiny' (a fresh tiny model from --seed) or an HF model dir."
)
@click.option("--seed", default=0, show_default=True, help="Seeds the base weights, the data and the order.")
@click.option(
    "--source",
    default="starter",
    show_default=True,
    help="Shipped task suite to learn from: starter (the embedded default's) or builtin.",
)
@click.option("--split", default="train", show_default=True, help="Split of that suite to learn from.")
@click.option("--variants", default=2, show_default=True, help="Conversations per task.")
@click.option("--limit", type=int, default=None, help="Use only the first N tasks of the split.")
@click.option("--steps", default=300, show_default=True, help="Optimizer steps.")
@click.option("--batch", default=8, show_default=True, help="Examples per step.")
@click.option("--lr", default=2e-3, show_default=True, help="Peak learning rate (warmup, then cosine to 10%).")
@click.option("--max-len", default=2048, show_default=True, help="Tokens kept per conversation.")
@click.option(
    "--window",
    default=0,
    show_default=True,
    help="N > 0: one N-token example per assistant turn; 0: whole conversations.",
)
@click.option("--threads", default=2, show_default=True, help="torch CPU threads (0: torch's default).")
@click.option(
    "--data",
    "data_in",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Train on these conversations (JSONL from --data-out) instead of generating them.",
)
@click.option("--data-out", type=click.Path(path_type=Path), default=None, help="Also write the conversations (JSONL).")
def sft(
    out_dir: Path,
    base: str,
    seed: int,
    source: str,
    split: str,
    variants: int,
    limit: int | None,
    steps: int,
    batch: int,
    lr: float,
    max_len: int,
    window: int,
    threads: int,
    data_out: Path | None,
    data_in: Path | None,
) -> None:
    """Fine-tune a policy on lego-agent conversations that fix tasks (loss on assistant tokens).

    \b
    The conversations come from lego.conductor.sft_data: planned from each task's gold patch and executed
    by the lego-agent's own tools on a copy of the repo, so observations are real. Same seed,
    same torch and thread count: same weights. The defaults rebuild the shipped warm start:
      lego sft --out lego/models/warm
    """
    from lego.conductor.sft import SFTConfig, run_sft

    cfg = SFTConfig(
        base=base,
        seed=seed,
        source=source,
        split=split,
        variants=variants,
        limit=limit,
        steps=steps,
        batch=batch,
        lr=lr,
        max_len=max_len,
        window=window,
        threads=threads,
    )
    path = run_sft(cfg, out_dir, data_out=data_out, data_in=data_in)
    click.echo(str(path))
