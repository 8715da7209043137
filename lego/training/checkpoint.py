"""Checkpoints: everything needed to continue a run exactly, written atomically.

Layout of ``RUN_DIR/checkpoints/``::

    step_000003/
        config.json, model.safetensors, ...   full fine-tune: the policy in HF layout (a loadable model dir),
                                              tokenizer / chat-template files copied from the base model
        adapter/                              LoRA: the peft adapter (adapter_config.json + safetensors);
                                              with export_merged=True the top level also holds merged weights
        optimizer.pt                          AdamW state
        rng.pt                                python, numpy, torch (and CUDA) RNG states
        trainer_state.json                    step, fidelity-gate state, the caller's ``extra``
        lego_config.json                      the LegoConfig the run used
    latest                                    the name of the newest complete checkpoint

A checkpoint is assembled in a hidden temp dir and renamed into place, then ``latest`` is rewritten
atomically, so a crash at any moment leaves the previous checkpoint intact and ``latest`` pointing
at a complete one. Resuming with a config that changes what the weights or the objective mean is
refused (:func:`check_compatible`); settings such as steps, lr or concurrency may change.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from lego.algos import FidelityGate
from lego.config import LegoConfig, TrainingConfig
from lego.errors import ResumeError
from lego.io import atomic_write_json, atomic_write_text
from lego.training import distributed as dist_utils

__all__ = [
    "MUST_MATCH",
    "Checkpointable",
    "check_compatible",
    "load_latest",
    "read_config",
    "restore_checkpoint",
    "save_checkpoint",
]

FORMAT = 1
MUST_MATCH: tuple[str, ...] = (
    "engine.model",
    "algorithm.ratio_level",
    "algorithm.clip_low",
    "algorithm.clip_high",
    "algorithm.aggregation",
    "algorithm.group_size",
    "algorithm.temperature",
    "algorithm.tis_cap",
    "algorithm.kl_coef",
    "algorithm.adv_eps",
    "training.finetune",
    "training.lora_rank",
    "training.lora_alpha",
    "training.dtype",
)
"""Fields that must equal the saved run's to resume: the base model, the objective, and what the
trainable weights are. Everything else (steps, lr, batch sizes, harness, ...) may change."""


class Checkpointable(Protocol):
    """What a checkpoint reads from and restores into (:class:`lego.training.trainer.Trainer` is one).

    A Protocol so this module needs nothing from the trainer, which calls it: no import loop."""

    step_count: int  # restored from the checkpoint

    @property
    def config(self) -> LegoConfig: ...
    @property
    def train_cfg(self) -> TrainingConfig: ...
    @property
    def model_dir(self) -> Path: ...
    @property
    def model(self) -> torch.nn.Module: ...
    @property
    def optimizer(self) -> torch.optim.Optimizer: ...
    @property
    def gate(self) -> FidelityGate: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def dtype(self) -> torch.dtype: ...

    def engine_state_dict(self) -> dict[str, torch.Tensor]: ...

    def param_groups(self) -> list[dict[str, Any]]: ...


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
)


def _get(cfg: LegoConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_compatible(saved: LegoConfig, now: LegoConfig) -> None:
    """Raise :class:`ResumeError` naming every :data:`MUST_MATCH` field that differs."""
    diffs = [
        f"{k}: run has {_get(saved, k)!r}, config has {_get(now, k)!r}"
        for k in MUST_MATCH
        if _get(saved, k) != _get(now, k)
    ]
    if diffs:
        raise ResumeError(
            "cannot resume: the config changes what the saved weights or objective mean ("
            + "; ".join(diffs)
            + "). Use the run's own config (its config.toml), or start a new run in another out_dir"
        )


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_weights(
    trainer: Checkpointable, out: Path, full_state: dict[str, torch.Tensor] | None, export_merged: bool
) -> None:
    lora = trainer.train_cfg.finetune == "lora"
    if lora:
        trainer.model.save_pretrained(out / "adapter")  # type: ignore[operator]
        if not export_merged:
            return
    state = trainer.engine_state_dict() if lora else full_state
    base = trainer.model.get_base_model() if lora else trainer.model  # type: ignore[operator]
    if state is not None and getattr(base.config, "tie_word_embeddings", False):
        # A tied model stores one tensor: an lm_head equal to the embedding is its alias, not a copy to save.
        emb = next((v for k, v in state.items() if k.endswith("embed_tokens.weight")), None)
        state = {
            k: v
            for k, v in state.items()
            if not (k.endswith("lm_head.weight") and emb is not None and torch.equal(v, emb))
        }
    base.save_pretrained(out, state_dict=state, safe_serialization=True)  # type: ignore[operator]
    for name in _TOKENIZER_FILES:
        src = trainer.model_dir / name
        if src.exists() and not (out / name).exists():
            shutil.copy2(src, out / name)


def save_checkpoint(
    trainer: Checkpointable,
    run_dir: str | Path,
    extra: dict[str, Any] | None = None,
    export_merged: bool = False,
    keep_last: int | None = None,
) -> Path:
    """Write ``checkpoints/step_NNNNNN`` for ``trainer.step_count`` and point ``latest`` at it.

    ``keep_last`` deletes all but the newest N step directories afterwards. Leftover temp dirs of
    an interrupted save are removed. Under torchrun every rank must call it (weights and optimizer
    state are gathered); only rank 0 writes."""
    ckpt_root = Path(run_dir) / "checkpoints"
    name = f"step_{trainer.step_count:06d}"
    final = ckpt_root / name
    full_state = None if trainer.train_cfg.finetune == "lora" else dist_utils.full_state_dict(trainer.model)
    optim_state = dist_utils.full_optimizer_state(trainer.model, trainer.optimizer)
    if not dist_utils.current().is_main:
        return final
    ckpt_root.mkdir(parents=True, exist_ok=True)
    for leftover in ckpt_root.glob(".step_*"):  # a save killed midway (single writer: rank 0)
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=ckpt_root))
    try:
        _write_weights(trainer, tmp, full_state, export_merged)
        torch.save(optim_state, tmp / "optimizer.pt")
        torch.save(_rng_state(), tmp / "rng.pt")
        state = {"format": FORMAT, "step": trainer.step_count, "gate": trainer.gate.state_dict(), "extra": extra or {}}
        atomic_write_json(tmp / "trainer_state.json", state, indent=2)
        atomic_write_json(tmp / "lego_config.json", trainer.config.model_dump(mode="json"), indent=2)
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if final.exists():  # re-saving a step (after a resume): move the old one aside first
            old = ckpt_root / f".{name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(ckpt_root / "latest", name + "\n")
    if keep_last is not None:
        for stale in sorted(p for p in ckpt_root.glob("step_*") if p.is_dir())[:-keep_last]:
            if stale != final:
                shutil.rmtree(stale, ignore_errors=True)
    return final


def _complete(path: Path) -> bool:
    return (path / "trainer_state.json").exists() and (path / "optimizer.pt").exists()


def load_latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (``latest``, else the highest complete step), or None."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / "latest"
    if pointer.exists():
        cand = root / pointer.read_text().strip()
        if _complete(cand):
            return cand
    steps = sorted(p for p in root.glob("step_*") if p.is_dir() and _complete(p))
    return steps[-1] if steps else None


def read_config(checkpoint_dir: str | Path) -> LegoConfig:
    return LegoConfig.model_validate(json.loads((Path(checkpoint_dir) / "lego_config.json").read_text()))


def restore_checkpoint(trainer: Checkpointable, checkpoint_dir: str | Path) -> dict[str, Any]:
    """Load weights, optimizer, RNG states, step and gate into ``trainer``; returns the saved ``extra``.

    Raises :class:`ResumeError` if the checkpoint is incomplete or its config is incompatible."""

    path = Path(checkpoint_dir)
    if not _complete(path):
        raise ResumeError(f"{path} is not a complete checkpoint (no trainer_state.json / optimizer.pt); pick another")
    check_compatible(read_config(path), trainer.config)
    state = json.loads((path / "trainer_state.json").read_text())
    if trainer.train_cfg.finetune == "lora":
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(trainer.model, load_file(path / "adapter" / "adapter_model.safetensors"))
    else:
        from transformers import AutoModelForCausalLM

        loaded = AutoModelForCausalLM.from_pretrained(path, dtype=trainer.dtype)
        _load_full(trainer.model, loaded.state_dict())
    optim_state = torch.load(path / "optimizer.pt", map_location=trainer.device, weights_only=False)
    dist_utils.load_full_optimizer_state(trainer.model, trainer.optimizer, optim_state)
    # hyper-parameters come from the config, which may change; each group takes its own lr back
    for group, fresh in zip(trainer.optimizer.param_groups, trainer.param_groups(), strict=True):
        cfg = trainer.train_cfg
        group.update(lr=fresh["base_lr"], base_lr=fresh["base_lr"], betas=cfg.betas, weight_decay=cfg.weight_decay)
    _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    trainer.step_count = int(state["step"])
    trainer.gate.load_state_dict(state.get("gate", {}))
    return dict(state.get("extra", {}))


def _load_full(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    if dist_utils.current().world_size > 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, dict(state.items()), options=StateDictOptions(full_state_dict=True))  # type: ignore[arg-type]
        return
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in state]
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise ResumeError(
            f"checkpoint weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
