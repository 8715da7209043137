"""The embedded default's tokenizer: byte-level BPE trained on the text lego ships.

Byte-level means every string encodes (no unknown token): the base alphabet is the 256 bytes,
and merges learned from ``lego/models/corpus/`` plus :func:`synthetic_corpus` make frequent
agent text (pytest output, diffs, JSON tool calls) cheap. The special tokens carry Qwen3's names
and roles, so the chat template and tool parsers treat this tokenizer like Qwen3's own:
``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` are special (skipped by
``decode(skip_special_tokens=True)``); ``<think>``, ``</think>``, ``<tool_call>`` ... are added
tokens that decode as text, as in Qwen3.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from lego.models.synth_corpus import synthetic_corpus

__all__ = [
    "CONTROL_TOKENS",
    "SPECIAL_TOKENS",
    "VOCAB_SIZE",
    "corpus_fingerprint",
    "corpus_texts",
    "train_tokenizer",
]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""ChatML control tokens (special: never produced by encoding ordinary text)."""

CONTROL_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
"""Structure tokens the model writes as text; single ids so parsing and masking are exact."""

VOCAB_SIZE = 4096
"""Upper bound on the vocabulary, special and control tokens included. BPE stops earlier when no
pair occurs twice: the shipped corpus (about 290 kB) yields about 3.5 k tokens, plenty for a
4-layer model and cheap to embed; more corpus text raises it towards the bound."""

CORPUS_SEED = 0
"""Seed of the synthetic part of the corpus; fixed, so every tiny model shares one tokenizer."""

# Pre-tokenization as in GPT-4/Qwen2: contractions, letter runs, single digits, punctuation runs,
# newlines and spaces, then byte-level mapping of each piece.
_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _corpus_files() -> list[Path]:
    root = resources.files("lego.models") / "corpus"
    files = sorted(Path(str(p)) for p in root.iterdir() if p.is_file())
    if not files:
        raise FileNotFoundError(f"the tokenizer corpus at {root} is empty; reinstall lego")
    return files


def corpus_texts() -> list[str]:
    """The training texts: every shipped corpus file (sorted by name), then the synthetic text."""
    return [p.read_text(encoding="utf-8") for p in _corpus_files()] + [synthetic_corpus(CORPUS_SEED)]


def corpus_fingerprint() -> str:
    """A hash of everything the tokenizer depends on (the shipped files and the synthesis code)."""
    h = hashlib.sha256()
    for p in _corpus_files():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(Path(__file__).with_name("synth_corpus.py").read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def train_tokenizer() -> PreTrainedTokenizerFast:
    """Train the BPE tokenizer (a few seconds); the result depends only on the corpus."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(CONTROL_TOKENS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus_texts(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in CONTROL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
