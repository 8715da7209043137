"""`lego bench engine`: generated tokens/s of the in-process engine at batch 1 and batch 8.

Baseline and figure come from the same run on the same model: batch-1 throughput is the
baseline, batch-8 throughput (8 concurrent requests batched by the engine's worker) the figure,
and their ratio is what carries across machines. Every request samples exactly ``--max-tokens``
tokens (no eos stops: the stop set is cleared by construction below), so both sides do equal work.
"""

from __future__ import annotations

import asyncio
import json
import platform
import time
from pathlib import Path

import click

__all__ = ["command", "measure"]


async def _throughput(engine, prompts: list[list[int]], max_tokens: int, concurrency: int, rounds: int) -> float:  # type: ignore[no-untyped-def]
    from lego.types import SamplingParams

    eos = set(engine.eos_token_ids)
    engine.eos_token_ids = []  # measure fixed-length generations; restored below
    try:
        generated = 0
        start = time.perf_counter()
        for r in range(rounds):
            batch = [prompts[(r * concurrency + i) % len(prompts)] for i in range(concurrency)]
            gens = await asyncio.gather(
                *[
                    engine.generate(p, SamplingParams(max_tokens=max_tokens, seed=r * 100 + i))
                    for i, p in enumerate(batch)
                ]
            )
            generated += sum(len(g.token_ids) for g in gens)
        return generated / (time.perf_counter() - start)
    finally:
        engine.eos_token_ids = sorted(eos)


def measure(model: str = "default", max_tokens: int = 64, rounds: int = 3) -> dict[str, object]:
    """Run the benchmark and return the JSON-ready result."""
    import torch

    from lego.engines.transformers_engine import TransformersEngine
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model

    path = resolve_model(model)
    chat = ChatFormat.from_pretrained(path)
    engine = TransformersEngine(path, device="auto", max_batch_size=16)
    prompts = [
        chat.render(
            [{"role": "user", "content": f"Fix the failing test number {i} in textkit."}], add_generation_prompt=True
        )
        for i in range(8)
    ]

    async def run() -> tuple[float, float]:
        await _throughput(engine, prompts, 8, 1, 1)  # warm-up (allocator, kernels)
        b1 = await _throughput(engine, prompts, max_tokens, 1, rounds)
        b8 = await _throughput(engine, prompts, max_tokens, 8, rounds)
        await engine.close()
        return b1, b8

    b1, b8 = asyncio.run(run())
    return {
        "bench": "engine",
        "model": str(path),
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "max_tokens": max_tokens,
        "rounds": rounds,
        "batch1_tokens_per_s": round(b1, 1),
        "batch8_tokens_per_s": round(b8, 1),
        "batch8_vs_batch1_ratio": round(b8 / b1, 2),
        "target_ratio": 3.0,
        "meets_target": b8 / b1 >= 3.0,
    }


@click.command("engine")
@click.option("--model", default="default", show_default=True, help="An HF model directory, or `default`.")
@click.option("--max-tokens", default=64, show_default=True, help="Tokens sampled per request.")
@click.option("--rounds", default=3, show_default=True, help="Rounds per batch size (more = steadier numbers).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the JSON here too.")
def command(model: str, max_tokens: int, rounds: int, out: Path | None) -> None:
    """Engine throughput: generated tokens/s at batch 1 (baseline) and batch 8, and their ratio.

    \b
    The in-process engine batches concurrent requests into one forward pass per step, so on the
    tiny default the batch-8 figure should be at least 3x batch 1 (target in the JSON).
    Example:  lego bench engine --out bench-engine.json
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    result = measure(model, max_tokens=max_tokens, rounds=rounds)
    text = json.dumps(result, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    click.echo(text)
