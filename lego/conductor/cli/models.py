"""`lego models ...` (build and locate policies) and `lego generate` (one chat completion)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click


def _quiet_transformers() -> None:
    """Loading a model is instant here; transformers' progress bars would only clutter the output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


@click.group("models")
def models_group() -> None:
    """Build and locate policy models.

    \b
    A policy is an ordinary Hugging Face model directory (config.json, safetensors, tokenizer
    files with a chat template). Everywhere lego takes a model you can pass such a directory
    (e.g. a downloaded Qwen3-0.6B) or `default`, the embedded tiny policy built on first use.

    \b
    Examples:
      lego models build-tiny /tmp/m          # a ~4M-parameter Qwen3-architecture model, seconds
      lego models path default               # where the embedded default lives (builds it once)
    """


@models_group.command("build-tiny")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Weight-initialisation seed; same seed, same bytes.")
@click.option(
    "--tool-format",
    type=click.Choice(["hermes", "qwen3_coder"]),
    default="hermes",
    show_default=True,
    help="How the chat template writes tool calls: Qwen3's JSON form or Qwen3-Coder's XML form.",
)
def build_tiny_cmd(out_dir: Path, seed: int, tool_format: str) -> None:
    """Build the tiny default policy into OUT_DIR.

    \b
    The model has Qwen3's architecture (hidden 256, 4 layers, GQA 4/2 heads, tied embeddings,
    32k context) with random weights from --seed, and a byte-level BPE tokenizer trained on the
    text lego ships, with ChatML special tokens and a Qwen3-compatible chat template with tools.
    It exists to run the whole pipeline (proxy, rollouts, training) on a laptop CPU.
    """
    import time

    from lego.models.tiny import build_tiny

    _quiet_transformers()
    start = time.perf_counter()
    path = build_tiny(out_dir, seed=seed, tool_format=tool_format)
    config = json.loads((path / "config.json").read_text())
    click.echo(
        f"built {path} in {time.perf_counter() - start:.1f}s "
        f"(vocab {config['vocab_size']}, hidden {config['hidden_size']}, {config['num_hidden_layers']} layers)"
    )
    click.echo(f'try: lego generate --model {path} "hello"')


@models_group.command("build-tiny-on")
@click.argument("tokenizer_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--model-type",
    default="qwen3",
    show_default=True,
    help="transformers architecture: qwen3, qwen3_moe, llama, gpt_oss, deepseek_v3, ...",
)
@click.option("--seed", default=0, show_default=True, help="Weight-initialisation seed.")
@click.option(
    "--chat-template",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A Jinja template stored with the tokenizer (gpt-oss ships none).",
)
def build_tiny_on_cmd(
    tokenizer_dir: Path, out_dir: Path, model_type: str, seed: int, chat_template: Path | None
) -> None:
    """Build a random-weight tiny MODEL_TYPE model on a real tokenizer (TOKENIZER_DIR holds
    tokenizer.json and tokenizer_config.json), to exercise a model family end to end on a CPU."""
    from lego.models.check import check_model_dir
    from lego.models.tiny import build_tiny_on

    _quiet_transformers()
    template = chat_template.read_text(encoding="utf-8") if chat_template else None
    path = build_tiny_on(tokenizer_dir, out_dir, model_type, seed, template)
    click.echo(f"built {path}")
    click.echo(check_model_dir(path).render())


@models_group.command("import")
@click.argument("gguf_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16"]),
    default="float32",
    show_default=True,
    help="float32 keeps the dequantized values exactly.",
)
def import_cmd(gguf_file: Path, out_dir: Path, dtype: str) -> None:
    """Convert GGUF_FILE (llama.cpp's format) to a Hugging Face model directory OUT_DIR (dequantized).

    The result is checked as `lego models check` does and the report printed.
    """
    from lego.models.check import check_model_dir
    from lego.models.gguf_import import import_gguf

    _quiet_transformers()
    out = import_gguf(gguf_file, out_dir, dtype)  # type: ignore[arg-type]
    click.echo(f"wrote {out}")
    click.echo(check_model_dir(out).render())


@models_group.command("check")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--chat-template",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Check with this Jinja template in place of the model's own.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_cmd(model_dir: Path, chat_template: Path | None, as_json: bool) -> None:
    """Say what lego will make of MODEL_DIR: chat template, tool support, stop ids, tied embeddings.

    Exits 1 when there is a problem (each printed with its fix).
    """
    from lego.models.check import check_model_dir

    _quiet_transformers()
    report = check_model_dir(model_dir, chat_template)
    click.echo(report.model_dump_json(indent=2) if as_json else report.render())
    if report.problems:
        raise SystemExit(1)


@models_group.command("path")
@click.argument("model", default="default")
def path_cmd(model: str) -> None:
    """Print the directory MODEL resolves to (`default` is built into the user cache on first use)."""
    from lego.models.tiny import resolve_model

    _quiet_transformers()
    click.echo(str(resolve_model(model)))


@click.command("generate")
@click.option("--model", "model", default="default", show_default=True, help="An HF model directory, or `default`.")
@click.argument("prompt")
@click.option("--system", default=None, help="An optional system message.")
@click.option("--max-tokens", default=64, show_default=True, help="Most new tokens to sample.")
@click.option("--temperature", default=1.0, show_default=True, help="0 means greedy decoding.")
@click.option("--seed", default=0, show_default=True, help="Sampling seed (same seed, same completion).")
@click.option("--raw", is_flag=True, help="Print the decoded tokens as sampled, special tokens included.")
def generate(
    model: str, prompt: str, system: str | None, max_tokens: int, temperature: float, seed: int, raw: bool
) -> None:
    """Send PROMPT as one user message through the in-process engine and print the reply.

    \b
    This is a smoke test of the whole model path: the chat template renders the message, the
    transformers engine samples token ids (with their logprobs), and the chat format parses
    them back into content, reasoning and tool calls. The embedded default has random weights,
    so expect gibberish from it; a real checkpoint gives a real answer.

    \b
    Examples:
      lego generate "hello"
      lego generate --model ~/models/Qwen3-0.6B --temperature 0 "Write a haiku about diffs"
    """
    from lego.engines.transformers_engine import TransformersEngine
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model
    from lego.types import SamplingParams

    _quiet_transformers()
    path = resolve_model(model)
    chat = ChatFormat.from_pretrained(path)
    engine = TransformersEngine(path, device="auto")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    prompt_ids = chat.render(messages, add_generation_prompt=True)
    sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)

    async def run():  # type: ignore[no-untyped-def]
        try:
            return await engine.generate(prompt_ids, sampling)
        finally:
            await engine.close()

    gen = asyncio.run(run())
    if raw:
        click.echo(chat.decode(gen.token_ids))
    else:
        parsed = chat.parse(gen.token_ids)
        if parsed.reasoning:
            click.secho(f"<think>{parsed.reasoning}</think>", dim=True)
        click.echo(parsed.content)
        for call in parsed.tool_calls:
            click.echo(f"tool call: {call.name}({call.arguments})")
        for error in parsed.parse_errors:
            click.secho(f"parse error: {error}", fg="yellow", err=True)
    click.secho(
        f"[{len(prompt_ids)} prompt + {len(gen.token_ids)} sampled tokens, finish={gen.finish_reason}, "
        f"{gen.engine_time_s:.2f}s]",
        dim=True,
        err=True,
    )
