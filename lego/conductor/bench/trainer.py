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

import itertools
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import torch

__all__ = ["BENCH_WORDS", "command", "keyword_reward", "measure", "recompute_vs_forward"]

BENCH_WORDS = (
    "parser token buffer socket thread kernel module import return patch branch commit merge rebase "
    "tensor matrix vector scalar gradient optimizer sampler router session record segment"
).split()
STEP_TARGET = 1.0
RECOMPUTE_TARGET = 0.9


def keyword_reward(text: str) -> float:
    """The bench's reward: how many times the letter ``e`` occurs in the completion (deterministic,
    cheap, and spread out enough on a random policy that every group has a nonzero advantage)."""
    return float(text.count("e"))


def _prompts(n: int) -> list[list[dict[str, str]]]:
    """``n`` single-user-message prompts of equal shape (so both sides see equal prompt lengths)."""
    return [
        [{"role": "user", "content": f"Write one short line about the word {BENCH_WORDS[i % len(BENCH_WORDS)]}."}]
        for i in range(n)
    ]


def _max_abs_diff(model: torch.nn.Module, initial: dict[str, torch.Tensor]) -> float:
    state = model.state_dict()
    return max(float((state[k].float() - v.float()).abs().max()) for k, v in initial.items())


def _steady(step_s: list[float], warmup: int) -> list[float]:
    return step_s[warmup:] if len(step_s) > warmup else step_s


def _summary(xs: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(xs), 4),
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
        "mean": round(statistics.fmean(xs), 4),
    }


# ---- TRL --------------------------------------------------------------------------------------


def run_trl(model_path: Path, spec: dict[str, Any], prompts: list[list[dict[str, str]]]) -> dict[str, Any]:
    """``spec["steps"]`` GRPOTrainer steps (GSPO settings, see the module docstring)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    b, g, mb = spec["prompts_per_step"], spec["group_size"], spec["micro_batch_size"]
    t_setup = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def reward_func(completions: list[Any], **_: Any) -> list[float | None]:
        return [keyword_reward(c[0]["content"] if isinstance(c, list) else str(c)) for c in completions]

    completion_tokens: list[int] = []
    gen_s: list[float] = []
    ends: list[float] = []
    logged: list[dict[str, float]] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ends.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ends.append(time.perf_counter())

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                logged.append({k: float(v) for k, v in logs.items() if isinstance(v, int | float)})

    with tempfile.TemporaryDirectory(prefix="lego-bench-trl-") as out:
        args = GRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            fp16=False,
            seed=spec["seed"],
            max_steps=spec["steps"],
            per_device_train_batch_size=mb,
            gradient_accumulation_steps=(b * g) // mb,
            num_generations=g,
            max_completion_length=spec["max_tokens"],
            temperature=spec["temperature"],
            top_p=1.0,
            top_k=0,
            learning_rate=spec["lr"],
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            optim="adamw_torch",
            beta=0.0,
            num_iterations=1,
            epsilon=3e-4,
            epsilon_high=4e-4,
            importance_sampling_level="sequence",
            loss_type="grpo",
            scale_rewards="group",
            use_vllm=False,
            disable_dropout=True,
            shuffle_dataset=False,
            dataloader_num_workers=0,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            log_completions=False,
        )
        n_prompts = b * spec["steps"]
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_func,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": prompts[:n_prompts]}),
            processing_class=tokenizer,
            callbacks=[Clock()],
        )
        trainer.remove_callback(PrinterCallback)  # it prints log dicts to stdout, where our JSON goes
        # Instrumentation, local to this bench's own trainer instance: TRL reports the generation
        # share of a step to no callback or log key (its profiling_context writes only to wandb,
        # mlflow or trackio), so the instance's private _generate is wrapped to time it and count
        # completion tokens. Nothing else in lego touches TRL; if TRL renames it, this lookup fails.
        generate = trainer._generate

        def timed_generate(batch_prompts: list[Any]) -> Any:
            t0 = time.perf_counter()
            result = generate(batch_prompts)
            gen_s.append(time.perf_counter() - t0)
            completion_tokens.append(sum(len(c) for c in result[1]))
            return result

        trainer._generate = timed_generate  # type: ignore[method-assign, assignment]
        setup_s = time.perf_counter() - t_setup
        trainer.train()
    step_s = [e - s for s, e in itertools.pairwise(ends)]
    return {
        "setup_s": round(setup_s, 3),
        "step_s": [round(x, 4) for x in step_s],
        "generate_s": [round(x, 4) for x in gen_s],
        "completion_tokens": completion_tokens,
        "losses": [d["loss"] for d in logged if "loss" in d],
        "rewards": [d["reward"] for d in logged if "reward" in d],
        "steps": len(step_s),
        "weights_max_abs_change": _max_abs_diff(model, initial),  # trained in place
    }


# ---- lego -------------------------------------------------------------------------------------


def run_lego(
    model_path: Path, spec: dict[str, Any], prompts: list[list[dict[str, str]]]
) -> tuple[dict[str, Any], Any, list[Any]]:
    """``spec["steps"]`` single-turn steps through proxy + engine + trainer + sync; returns the
    result, the trainer and every recorded TrainItem (for the recompute measurement)."""
    from lego.conductor.single_turn import SingleTurnLoop
    from lego.conductor.trainer import Trainer
    from lego.config import LegoConfig, ProxyConfig
    from lego.engines.transformers_engine import TransformersEngine
    from lego.models.chat import ChatFormat
    from lego.proxies.server import ProxyServer

    b, g = spec["prompts_per_step"], spec["group_size"]
    cfg = LegoConfig.model_validate(
        {
            "algorithm": {"ratio_level": "sequence", "clip_low": 3e-4, "clip_high": 4e-4, "group_size": g,
                          "aggregation": "seq-mean-token-mean", "temperature": spec["temperature"], "kl_coef": 0.0},
            "training": {"lr": spec["lr"], "weight_decay": 0.0, "grad_clip": 1.0, "dtype": "float32",
                         "micro_batch_size": spec["micro_batch_size"], "seed": spec["seed"]},
        }
    )  # fmt: skip
    t_setup = time.perf_counter()
    engine = TransformersEngine(
        model_path, device="cpu", dtype="float32", max_batch_size=b * g, seed=spec["seed"], num_threads=spec["threads"]
    )
    trainer = Trainer(model_path, cfg, device="cpu")
    initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    server = ProxyServer(engine, ChatFormat.from_pretrained(model_path), ProxyConfig(port=0))
    server.start()
    loop = SingleTurnLoop(trainer, engine, server, keyword_reward, group_size=g, max_tokens=spec["max_tokens"])
    setup_s = time.perf_counter() - t_setup
    steps: list[Any] = []
    items: list[Any] = []
    try:
        for k in range(spec["steps"]):
            steps.append(loop.step(prompts[k * b : (k + 1) * b]))
            items.extend(steps[-1].items)
    finally:
        loop.close()
        server.stop()
    result = {
        "setup_s": round(setup_s, 3),
        "step_s": [round(s.timings["step_s"], 4) for s in steps],
        "rollout_s": [round(s.timings["rollout_s"], 4) for s in steps],
        "rollout_engine_s": [round(s.timings["rollout_engine_s"], 4) for s in steps],
        "train_s": [round(s.timings["train_s"], 4) for s in steps],
        "recompute_s": [round(s.metrics["perf/recompute_s"], 4) for s in steps],
        "sync_s": [round(s.timings["sync_s"], 4) for s in steps],
        "completion_tokens": [s.completion_tokens for s in steps],
        "losses": [s.metrics["actor/pg_loss"] for s in steps],
        "rewards": [statistics.fmean(s.rewards) for s in steps],
        "pearson": [s.metrics.get("training/rollout_actor_probs_pearson_corr", float("nan")) for s in steps],
        "steps": len(steps),
        "policy_version": engine.policy_version,
        "weights_max_abs_change": _max_abs_diff(trainer.model, initial),
        "engine_weights_max_abs_change": _max_abs_diff(engine.model, initial),
    }
    return result, trainer, items


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
    prompts = _prompts(prompts_per_step * steps)
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
