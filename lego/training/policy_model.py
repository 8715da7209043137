"""The policy the trainer updates: loading it, wrapping it with LoRA, its forward pass on recorded
ids, and its weights out under the base model's names.

Split from :mod:`lego.training.trainer` so the update (loss, fidelity, optimizer) reads apart from
how the model is built and exported. Every function takes the model explicitly; none holds state.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from lego.config import TrainingConfig
from lego.errors import ModelError
from lego.training import distributed as dist_utils
from lego.training.items import PaddedBatch

__all__ = ["load_policy", "merged_state_dict", "supports_logits_to_keep", "token_logp", "wrap_lora"]


def load_policy(
    model_dir: Path, cfg: TrainingConfig, device: torch.device, dtype: torch.dtype, with_reference: bool
) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """The trainable policy (LoRA-wrapped with ``finetune == "lora"``, eval mode, FSDP2-sharded under
    torchrun) and, when ``with_reference`` and not LoRA, a frozen copy as the KL reference (with LoRA
    the base model under ``disable_adapter()`` is the reference, so no copy is made)."""
    try:
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"cannot load a causal LM from {model_dir}: {exc}; pass a Hugging Face model directory"
        ) from exc
    model.to(device)
    reference: torch.nn.Module | None = None
    if cfg.finetune == "lora":
        model = wrap_lora(model, cfg, model_dir)
    elif with_reference:
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    model.eval()  # no dropout: the trainer's log-probs must match the engine's forward pass
    if dist_utils.current().world_size > 1:
        dist_utils.shard_model(model)
    return model, reference


def wrap_lora(model: torch.nn.Module, cfg: TrainingConfig, model_dir: Path) -> torch.nn.Module:
    """``model`` with LoRA adapters on every linear layer (rank ``lora_rank``, alpha ``lora_alpha``)
    and trainable copies of ``lora_modules_to_save``."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ModelError("training.finetune='lora' needs peft: pip install 'peft>=0.12'") from exc
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,  # type: ignore[arg-type]  # peft accepts floats
        lora_dropout=0.0,
        target_modules="all-linear",
        modules_to_save=modules_to_save(model, cfg.lora_modules_to_save, model_dir) or None,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)  # type: ignore[arg-type, no-any-return]


def modules_to_save(model: torch.nn.Module, wanted: list[str], model_dir: Path) -> list[str]:
    """The full module names ``training.lora_modules_to_save`` means: every module whose name ends
    with one of ``wanted`` (a plain suffix, so 'norm' is q_norm and input_layernorm too), outermost
    only. peft is handed these exact names, not the suffixes: its own matching rule changed between
    releases (0.22 matches whole dotted components), and the set trained must not follow the
    installed version."""
    names = [n for n, _ in model.named_modules() if n]
    chosen: list[str] = []
    for suffix in wanted:
        hits = [n for n in names if n.endswith(suffix)]
        if not hits:
            raise ModelError(
                f"training.lora_modules_to_save: no module name ends with {suffix!r} in {model_dir}; "
                "give a name suffix, e.g. 'norm' (every RMSNorm of a Qwen3/Llama model) or 'model.norm' (the final one)"
            )
        chosen += [n for n in hits if n not in chosen]
    return [n for n in chosen if not any(n.startswith(f"{other}.") for other in chosen)]


def supports_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the model's forward takes per-row ``logits_to_keep`` positions (most HF causal LMs)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def token_logp(
    model: torch.nn.Module, mb: PaddedBatch, temperature: float, logits_to_keep: bool, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(response token | prefix) at ``temperature``: (B, R), and the entropy (B, R) if asked."""
    if logits_to_keep:
        # Project only the response positions onto the vocabulary (transformers' logits_to_keep
        # takes (B, R) positions): a long agentic prompt costs no lm_head work or logits memory.
        logits = model(
            input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False, logits_to_keep=mb.gather_pos
        ).logits  # (B, R, V)
        if logits.dim() == 4:  # a transformers that takes only 1-D positions indexed (B, B, R, V): row b's are [b, b]
            rows = torch.arange(logits.shape[0], device=logits.device)
            logits = logits[rows, rows]
    else:
        full = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits  # (B, L, V)
        logits = torch.gather(full, 1, mb.gather_pos[..., None].expand(-1, -1, full.shape[-1]))  # (B, R, V)
    resp_logits = logits.float() / temperature  # (B, R, V)
    logz = torch.logsumexp(resp_logits, dim=-1)  # (B, R)
    logp = resp_logits.gather(-1, mb.resp_ids[..., None]).squeeze(-1) - logz
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(resp_logits, dim=-1)
            entropy = logz - (probs * resp_logits).sum(-1)
    return logp, entropy


def merged_state_dict(model: torch.nn.Module, finetune: str) -> dict[str, torch.Tensor]:
    """The policy's full weights under the base model's Hugging Face names (LoRA merged in),
    detached copies — what an in-process engine's ``load_weights`` takes."""
    if finetune != "lora":
        return {k: v.detach().clone() for k, v in dist_utils.full_state_dict(model).items()}
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()  # type: ignore[operator]
    out: dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name or ".original_module." in name:  # modules_to_save: the trained copy wins
            continue
        if ".modules_to_save." in name:
            if ".modules_to_save.default." not in name:
                continue
            name = name.replace(".modules_to_save.default.", ".")
        out[name.replace(".base_layer.", ".")] = tensor.detach().clone()
    for mod_name, module in base.named_modules():
        if isinstance(module, LoraLayer) and "default" in module.lora_A:
            key = f"{mod_name}.weight"
            delta = module.get_delta_weight("default")  # type: ignore[attr-defined]
            out[key] = (out[key].float() + delta.float()).to(out[key].dtype)
    return out
