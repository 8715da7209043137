"""`lego sft`: supervised fine-tuning of a policy on lego-agent conversations (the warm start).

A randomly initialised policy never calls a tool correctly, so every RL group has zero reward
spread and the loop learns nothing. SFT on conversations from :mod:`lego.conductor.sft_data` teaches the
protocol (one well-formed tool call per turn, the editor's arguments, ``submit``) and the shape of
a fix. The loss is next-token cross entropy on the assistant tokens only: the mask comes from the
chat template's ``{% generation %}`` markers (:meth:`ChatFormat.assistant_mask`), so the model is
never trained to produce observations or prompts.

The defaults are the recipe of the shipped warm start (``lego/models/warm``, see its ``lego_sft.json``):
the starter suite's 600 train tasks x 2 conversations, whole conversations (``window=0``, ~1k tokens:
the agent's 659-token system prompt and tools included, so training sees exactly the prompts the
policy is served), 300 steps of 8 at a peak lr of 2e-3, two threads: ~13 min on a quiet 2-core CPU.
Windowed examples (``--window 512``) are ~10x cheaper per assistant token but cut the issue out of
the context of later turns. On the built-in suite (symptom-only issues in real libraries) the same
4 M-param model learns the protocol but solves no held-out task; on starter tasks with names drawn
from a large pool it did not learn to copy unseen names in 400 steps; see docs/ARCHITECTURE.md.

Deterministic from ``seed``: the base weights (``build_tiny(seed)``), the data (the generator is
seeded), the example order (a seeded permutation per epoch) and ``torch.manual_seed`` before
training; on one machine with the same torch version and thread count the written weights are
identical. The output is an ordinary HF model directory (tokenizer and chat template included)
written atomically: a temp sibling renamed into place, so a crash never leaves half a model.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lego.config import SFTConfig
from lego.errors import LegoError
from lego.models.chat import ChatFormat

__all__ = ["Example", "masked_loss", "run_sft", "tokenize", "train_sft", "write_model"]


class Example:
    """One tokenised conversation: ids and the assistant mask (1 where the loss applies)."""

    def __init__(self, instance_id: str, ids: list[int], mask: list[int]) -> None:
        self.instance_id, self.ids, self.mask = instance_id, ids, mask


def tokenize(conversations: Sequence[dict[str, Any]], chat: ChatFormat, max_len: int, window: int = 0) -> list[Example]:
    """Render each conversation with the model's template; keep at most ``max_len`` tokens
    (or, with ``window``, one ``window``-token example ending at each assistant turn)."""
    out: list[Example] = []
    for conv in conversations:
        ids, mask = chat.assistant_mask(conv["messages"], conv["tools"])
        if len(ids) != len(mask):
            raise LegoError("the chat template's assistant mask does not match its ids; check {% generation %}")
        if window:
            ends = [i + 1 for i in range(len(mask)) if mask[i] and (i + 1 == len(mask) or not mask[i + 1])]
            parts = [
                Example(conv["instance_id"], ids[max(0, e - window) : e], mask[max(0, e - window) : e]) for e in ends
            ]
        else:
            parts = [Example(conv["instance_id"], ids[:max_len], mask[:max_len])]
        out.extend(ex for ex in parts if sum(ex.mask[1:]) > 0)  # skip windows with nothing to learn
    return out


def masked_loss(model: Any, ex: Example) -> tuple[torch.Tensor, int]:
    """Summed next-token cross entropy over assistant positions, and how many positions that is."""
    ids = torch.tensor([ex.ids], dtype=torch.long)
    target_mask = torch.tensor(ex.mask[1:], dtype=torch.bool)
    logits = model(input_ids=ids).logits[0, :-1].float()
    targets = ids[0, 1:]
    losses = torch.nn.functional.cross_entropy(logits[target_mask], targets[target_mask], reduction="sum")
    return losses, int(target_mask.sum())


def _lr_at(step: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_sft(
    model: Any,
    examples: Sequence[Example],
    cfg: SFTConfig,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """``cfg.steps`` AdamW updates, each over ``cfg.batch`` examples (token-weighted mean loss).

    Examples are taken in a seeded permutation, reshuffled each pass. Returns the per-step losses.
    """
    if not examples:
        raise LegoError("no SFT examples; generate conversations first (is the split empty?)")
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _train(model, examples, cfg, on_step)
    finally:
        torch.set_num_threads(threads)


def _train(
    model: Any, examples: Sequence[Example], cfg: SFTConfig, on_step: Callable[[int, float], None] | None
) -> list[float]:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    model.train()
    order: list[int] = []
    losses = []
    for step in range(cfg.steps):
        batch = []
        for _ in range(cfg.batch):
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            batch.append(examples[order.pop()])
        n_tokens = sum(sum(ex.mask[1:]) for ex in batch)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for ex in batch:
            loss, _ = masked_loss(model, ex)
            (loss / n_tokens).backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(total / n_tokens)
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


def write_model(model: Any, tokenizer: Any, out_dir: Path, meta: dict[str, Any]) -> Path:
    """Save an HF model dir atomically (temp sibling, then rename over any previous one)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "chat_template.jinja").write_text(tokenizer.chat_template, encoding="utf-8")
        (tmp / "lego_sft.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _base_model(cfg: SFTConfig, scratch: Path) -> Path:
    if cfg.base == "tiny":
        from lego.models.tiny import build_tiny

        return build_tiny(scratch / "base", seed=cfg.seed)
    from lego.models.tiny import resolve_model

    return resolve_model(cfg.base)


def run_sft(
    cfg: SFTConfig,
    out_dir: str | Path,
    data_out: str | Path | None = None,
    quiet: bool = False,
    data_in: str | Path | None = None,
) -> Path:
    """Build/load the base, generate the conversations (or read ``data_in``), train, write the model."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lego.conductor.sft_data import generate
    from lego.tasks.sources import load_source

    console = Console(stderr=True, quiet=quiet)
    t0 = time.monotonic()
    source = load_source(f"{cfg.source}:{cfg.split}")
    records = [(source, r) for r in (source.records()[: cfg.limit] if cfg.limit else source.records())]
    for spec, n in cfg.extra.items():
        more = load_source(f"{spec}:{cfg.split}")
        records += [(more, r) for r in more.records()[:n]]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with tempfile.TemporaryDirectory(prefix="lego-sft-base-") as scratch:
        base = _base_model(cfg, Path(scratch))
        with Progress(*columns, TextColumn("{task.fields[info]}"), console=console) as bar:
            if data_in:
                convs = [json.loads(line) for line in Path(data_in).read_text(encoding="utf-8").splitlines() if line]
            else:
                gen = bar.add_task("sft data", total=len(records) * cfg.variants, info="")
                tasks = [src.materialize(r) for src, r in records]
                convs = generate(tasks, cfg.seed, cfg.variants, progress=lambda: bar.advance(gen))
            if data_out:
                Path(data_out).write_text("".join(json.dumps(c) + "\n" for c in convs), encoding="utf-8")
            tokenizer = AutoTokenizer.from_pretrained(str(base))
            examples = tokenize(convs, ChatFormat(tokenizer), cfg.max_len, cfg.window)
            model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
            job = bar.add_task("sft train", total=cfg.steps, info="")

            def on_step(step: int, loss: float) -> None:
                bar.update(job, advance=1, info=f"loss {loss:.3f}")
                if not console.is_terminal and (step + 1) % 5 == 0:  # a log file still shows progress
                    console.print(f"sft step {step + 1}/{cfg.steps} loss {loss:.3f} {time.monotonic() - t0:.0f}s")

            losses = train_sft(model, examples, cfg, on_step=on_step)
        meta = {
            "config": cfg.model_dump(),
            "data": str(data_in) if data_in else "generated",
            "conversations": len(convs),
            "examples": len(examples),
            "assistant_tokens": sum(sum(e.mask) for e in examples),
            "tokens": sum(len(e.ids) for e in examples),
            "losses": losses,
            "wall_s": round(time.monotonic() - t0, 1),
            "params": sum(p.numel() for p in model.parameters()),
            "torch": torch.__version__,
            "threads": cfg.threads or torch.get_num_threads(),
        }
        return write_model(model, tokenizer, Path(out_dir), meta)
