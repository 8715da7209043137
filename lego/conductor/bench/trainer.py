"""`lego bench trainer`: wall time per GSPO step, lego against TRL's GRPOTrainer, in one run.

Both sides train the same tiny model from the same initial weights, on the same prompts (B per
step, in the same order), with the same group size G, completion budget, step count, reward
function, learning rate, optimizer (torch AdamW, constant lr, grad clip 1.0), fp32 on CPU and the
same number of torch threads:

* **TRL**: ``GRPOTrainer`` with ``importance_sampling_level="sequence"`` (GSPO), ``loss_type="grpo"``
  (each sequence's token mean, then the mean over sequences: lego's ``seq-mean-token-mean``),
  GSPO's clip (3e-4 / 4e-4), ``beta=0`` (no reference model), ``num_iterations=1``, no vLLM,
  rewards scaled per group, generation with ``model.generate`` on the training model. Its
  generation time is taken by wrapping the instance's private ``_generate``: TRL exposes that
  timing to no callback or log (only to wandb/mlflow/trackio), and the patch stays on this one
  trainer object.
* **lego**: :class:`lego.conductor.single_turn.SingleTurnLoop` — every completion is a real HTTP request to
  a :class:`~lego.proxies.server.ProxyServer` session in front of a ``TransformersEngine``; the
  recorded segments go to ``Trainer.step`` (recompute, fidelity, GSPO loss, AdamW); then
  ``sync_weights`` copies the new weights into the engine.

What lego does that TRL does not (stated in the JSON under ``differences``): it checks the
rollout-train fidelity every step (π_old comes from the loss pass's own forward, as in TRL), it goes
through HTTP, the chat template and the recorder for every completion, and it copies the weights
into a separate engine after each update. Step 1 of each run is warm-up (lazy initialisation) and left out of the ratio.

Also measured: recompute throughput. ``Trainer.recompute`` over every segment the lego run
recorded, against a bare ``model(input_ids, attention_mask)`` forward pass (full logits, input
tensors built before the clock starts) over the same padded micro-batches; both under
``torch.no_grad``. Target: recompute ≥ 0.9× the bare forward's tokens/s.

The machine may be noisy: ``--repeats`` runs both sides several times, alternating which goes
first. ``step_time_ratio`` is the median over repeats of (lego's median step / TRL's median step),
with each repeat's ratio and their spread beside it; ``step_time_ratio_pooled`` divides the
medians of all steady steps pooled over repeats. ``phases_median_s`` splits a step
into where the time went (lego: rollout / train, of which fidelity + gate / sync; TRL: generate /
the rest).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import click
import torch

from lego.conductor.bench.trainer_sides import BENCH_WORDS, bench_prompts, keyword_reward, run_lego, run_trl

# BENCH_WORDS and keyword_reward are named here too: the bench's tests and readers find the prompts and
# the reward beside the measurement that uses them.
__all__ = ["BENCH_WORDS", "command", "keyword_reward", "measure", "recompute_vs_forward"]

STEP_TARGET = 1.0
RECOMPUTE_TARGET = 0.9


def _steady(step_s: list[float], warmup: int) -> list[float]:
    return step_s[warmup:] if len(step_s) > warmup else step_s


def _summary(xs: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(xs), 4),
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
        "mean": round(statistics.fmean(xs), 4),
    }


# ---- recompute vs bare forward ----------------------------------------------------------------


def recompute_vs_forward(trainer: Any, items: list[Any], reps: int = 5) -> dict[str, Any]:
    """Tokens/s of ``trainer.recompute(items)`` and of a bare forward pass over the same padded
    micro-batches (best of ``reps``, alternating, after one warm-up of each)."""

    model = trainer.model
    batches = trainer.micro_batches(items)  # the same padded micro-batches recompute runs
    tokens = sum(len(it.segment.prompt_ids) + len(it.segment.response_ids) for it in items)

    @torch.no_grad()
    def bare() -> None:
        for mb in batches:
            model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False)

    bare()
    trainer.recompute(items)
    t_fwd, t_rec = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        bare()
        t_fwd.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with torch.no_grad():
            trainer.recompute(items)
        t_rec.append(time.perf_counter() - t0)
    fwd_tps, rec_tps = tokens / min(t_fwd), tokens / min(t_rec)
    return {
        "segments": len(items),
        "tokens": tokens,
        "micro_batch_size": trainer.train_cfg.micro_batch_size,
        "bare_forward_tokens_per_s": round(fwd_tps, 1),
        "recompute_tokens_per_s": round(rec_tps, 1),
        "ratio": round(rec_tps / fwd_tps, 3),
        "ratio_per_rep": [round(f / r, 3) for f, r in zip(t_fwd, t_rec, strict=True)],
        "target_ratio": RECOMPUTE_TARGET,
        "meets_target": rec_tps / fwd_tps >= RECOMPUTE_TARGET,
    }


# ---- the whole bench --------------------------------------------------------------------------


DIFFERENCES = [
    "lego computes the fidelity metrics (trainer vs engine logprobs) and runs the gate every step; both take "
    "pi_old from the loss pass's own detached forward (one update per batch)",
    "lego samples through a real HTTP proxy session per completion (chat template render, recorder); "
    "TRL calls model.generate in process",
    "lego's engine holds its own weight copy, refreshed by sync_weights after every update; TRL samples "
    "with the training model",
    "samplers differ (lego's engine loop vs transformers' generate): completions differ; both stop on "
    "the same eos ids, and completion tokens per step are reported for each side",
    "the model runs in eval mode in lego and in train mode (dropout disabled) in TRL; the tiny model has no dropout",
]


def measure(
    model: str = "tiny",
    prompts_per_step: int = 2,
    group_size: int = 4,
    max_tokens: int = 64,
    steps: int = 5,
    micro_batch_size: int = 4,
    lr: float = 1e-5,
    threads: int | None = None,
    repeats: int = 3,
    seed: int = 0,
    warmup_steps: int = 1,
) -> dict[str, Any]:
    """Run both sides ``repeats`` times (alternating order) and the recompute measurement."""
    import os

    from lego.models.tiny import resolve_model

    if (prompts_per_step * group_size) % micro_batch_size:
        raise click.BadParameter(
            f"prompts_per_step*group_size ({prompts_per_step * group_size}) must be a multiple of "
            f"micro_batch_size ({micro_batch_size}): TRL accumulates whole micro-batches"
        )
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    torch.set_num_threads(threads)
    path = resolve_model(model)
    spec = dict(
        prompts_per_step=prompts_per_step, group_size=group_size, max_tokens=max_tokens, steps=steps,
        micro_batch_size=micro_batch_size, lr=lr, threads=threads, seed=seed, temperature=1.0,
    )  # fmt: skip
    prompts = bench_prompts(prompts_per_step * steps)
    runs: list[dict[str, Any]] = []
    recompute: dict[str, Any] = {}
    for r in range(repeats):
        order = ("trl", "lego") if r % 2 == 0 else ("lego", "trl")
        pair: dict[str, Any] = {"order": list(order)}
        for side in order:
            torch.manual_seed(seed)
            torch.set_num_threads(threads)
            if side == "trl":
                pair["trl"] = run_trl(path, spec, prompts)
            else:
                pair["lego"], trainer, items = run_lego(path, spec, prompts)
                if not recompute:
                    recompute = recompute_vs_forward(trainer, items)
        lego_s = statistics.median(_steady(pair["lego"]["step_s"], warmup_steps))
        trl_s = statistics.median(_steady(pair["trl"]["step_s"], warmup_steps))
        pair["lego_median_step_s"], pair["trl_median_step_s"] = round(lego_s, 4), round(trl_s, 4)
        pair["ratio"] = round(lego_s / trl_s, 3)
        runs.append(pair)
    ratios = [p["ratio"] for p in runs]

    def pooled(side: str, key: str) -> list[float]:
        return [x for p in runs for x in _steady(p[side][key], warmup_steps)]

    lego_all, trl_all = pooled("lego", "step_s"), pooled("trl", "step_s")
    trl_update = [s - g for s, g in zip(trl_all, pooled("trl", "generate_s"), strict=True)]
    # What lego's step would take without its separate no-grad recompute pass (a projection, not a run).
    phases = {
        "lego_rollout_s": statistics.median(pooled("lego", "rollout_s")),
        "lego_rollout_engine_s": statistics.median(pooled("lego", "rollout_engine_s")),
        "trl_generate_s": statistics.median(pooled("trl", "generate_s")),
        "lego_train_s": statistics.median(pooled("lego", "train_s")),
        "lego_recompute_s": statistics.median(pooled("lego", "recompute_s")),
        "lego_sync_s": statistics.median(pooled("lego", "sync_s")),
        "trl_update_s": statistics.median(trl_update),
    }
    ratio = statistics.median(ratios)
    return {
        "bench": "trainer",
        "model": str(path),
        "device": "cpu",
        "dtype": "float32",
        "torch_threads": threads,
        "platform": platform.platform(),
        "spec": spec | {"warmup_steps_excluded": warmup_steps, "repeats": repeats, "reward": "count of 'e'"},
        "lego_step_s": _summary(lego_all),
        "trl_step_s": _summary(trl_all),
        "step_time_ratio": round(ratio, 3),
        "step_time_ratio_spread": {"min": min(ratios), "max": max(ratios), "per_repeat": ratios},
        "step_time_ratio_pooled": round(statistics.median(lego_all) / statistics.median(trl_all), 3),
        "step_target_ratio": STEP_TARGET,
        "step_meets_target": ratio <= STEP_TARGET,
        "phases_median_s": {k: round(v, 4) for k, v in phases.items()},
        "rollout_vs_generate_ratio": round(phases["lego_rollout_s"] / phases["trl_generate_s"], 3),
        "recompute": recompute,
        "differences": DIFFERENCES,
        "runs": runs,
    }


@click.command("trainer")
@click.option("--model", default="tiny", show_default=True, help="HF model dir, or `tiny` (random tiny).")
@click.option("--prompts-per-step", default=2, show_default=True, help="B: prompts per step.")
@click.option("--group-size", default=4, show_default=True, help="G: completions per prompt.")
@click.option("--max-tokens", default=64, show_default=True, help="Completion budget per request.")
@click.option("--steps", default=5, show_default=True, help="Optimizer steps per run.")
@click.option("--micro-batch-size", default=4, show_default=True, help="Sequences per forward/backward pass.")
@click.option("--lr", default=1e-5, show_default=True, help="Learning rate (constant) on both sides.")
@click.option("--threads", type=int, default=None, help="torch threads for both sides [default: half the cores].")
@click.option("--repeats", default=3, show_default=True, help="Runs of each side (alternating order).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the JSON here too.")
def command(
    model: str,
    prompts_per_step: int,
    group_size: int,
    max_tokens: int,
    steps: int,
    micro_batch_size: int,
    lr: float,
    threads: int | None,
    repeats: int,
    out: Path | None,
) -> None:
    """Trainer speed: wall time per GSPO step, lego (proxy + engine + trainer) vs TRL's GRPOTrainer.

    \b
    Same tiny model, prompts, G, completion length, steps, reward, lr and threads on both sides;
    ratio = lego / TRL median step time (target <= 1.0). Also recompute vs bare-forward throughput
    (target >= 0.9). Needs TRL: pip install 'lego-rl[bench]'.
    Example:  lego bench trainer --out bench-trainer.json
    """
    import logging

    from transformers.utils import logging as hf_logging

    try:
        import trl  # noqa: F401
    except ImportError as exc:
        raise click.ClickException("lego bench trainer needs TRL: pip install 'lego-rl[bench]'") from exc
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    result = measure(
        model,
        prompts_per_step=prompts_per_step,
        group_size=group_size,
        max_tokens=max_tokens,
        steps=steps,
        micro_batch_size=micro_batch_size,
        lr=lr,
        threads=threads,
        repeats=repeats,
    )
    text = json.dumps(result, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    click.echo(text)
