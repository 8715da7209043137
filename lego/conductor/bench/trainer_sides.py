"""The two sides `lego bench trainer` times against each other: TRL's ``GRPOTrainer`` and lego's single-turn
loop, on the same prompts, reward and settings (the comparison and its caveats: :mod:`lego.conductor.bench.trainer`).
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["BENCH_WORDS", "bench_prompts", "keyword_reward", "run_lego", "run_trl"]

BENCH_WORDS = (
    "parser token buffer socket thread kernel module import return patch branch commit merge rebase "
    "tensor matrix vector scalar gradient optimizer sampler router session record segment"
).split()


def keyword_reward(text: str) -> float:
    """The bench's reward: how many times the letter ``e`` occurs in the completion (deterministic,
    cheap, and spread out enough on a random policy that every group has a nonzero advantage)."""
    return float(text.count("e"))


def bench_prompts(n: int) -> list[list[dict[str, str]]]:
    """``n`` single-user-message prompts of equal shape (so both sides see equal prompt lengths)."""
    return [
        [{"role": "user", "content": f"Write one short line about the word {BENCH_WORDS[i % len(BENCH_WORDS)]}."}]
        for i in range(n)
    ]


def _max_abs_diff(model: torch.nn.Module, initial: dict[str, torch.Tensor]) -> float:
    state = model.state_dict()
    return max(float((state[k].float() - v.float()).abs().max()) for k, v in initial.items())


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
    from lego.config import LegoConfig, ProxyConfig
    from lego.engines.transformers_engine import TransformersEngine
    from lego.models.chat import ChatFormat
    from lego.proxies.server import ProxyServer
    from lego.training.trainer import Trainer

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
