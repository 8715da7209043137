"""``lego models import``: a GGUF checkpoint (llama.cpp's format) to an ordinary HF model directory.

transformers reads GGUF (with the ``gguf`` package) and dequantizes every tensor on load, but
refuses ``save_pretrained`` on a model loaded that way. So the loaded weights are copied into a
fresh model built from the same config and that one is saved: float32 by default (the exact
dequantized values) or bf16. Tied input/output embeddings stay tied (one tensor saved). The
tokenizer (with the chat template the GGUF carries) is saved beside it, and generation_config.json
gets the chat format's stop ids, so every loader, lego's engine included, stops where the template
ends a turn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from lego.errors import ModelError

__all__ = ["import_gguf"]


def import_gguf(gguf_path: str | Path, out_dir: str | Path, dtype: Literal["float32", "bfloat16"] = "float32") -> Path:
    """Write the HF model directory of ``gguf_path`` to ``out_dir`` and return it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from lego.models.chat import ChatFormat

    src = Path(gguf_path).expanduser()
    if not src.is_file() or src.suffix != ".gguf":
        raise ModelError(f"{str(src)!r} is not a .gguf file; pass the path of a GGUF checkpoint")
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError as exc:
        raise ModelError("reading GGUF needs the gguf package: pip install gguf") from exc
    loaded = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    config = loaded.config
    config.dtype = dtype
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config)
    # assign=True adopts the loaded tensors (no second copy); tie again so lm_head is the embedding.
    fresh.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    if config.tie_word_embeddings:
        fresh.tie_weights()
    fresh = fresh.to(getattr(torch, dtype)).eval()
    chat = ChatFormat(tokenizer)  # the template must parse and end turns; refused here, not at serve time
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else chat.eos_token_ids[0]
    fresh.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=list(chat.eos_token_ids), pad_token_id=pad
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "lego_import.json").write_text(json.dumps({"source": src.name, "dtype": dtype}, indent=2) + "\n")
    return out
