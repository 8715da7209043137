"""`lego bench probe`: does a policy have a skill? The teacher-forced probability of the decisive tokens.

Pass rates say whether a policy solves a task; they do not say whether its successes come from a
skill it sometimes uses (which sharpening, a lower temperature or RL can make more likely) or from
a coin it cannot read (which none of them can). This bench takes the gold conversations of a task
selection (the warm start's own SFT generator: the planned, executed lego-agent conversation that
fixes each task), and for every assistant position whose gold token is one of ``--token``, the
probability each model gives that token (softmax at ``--temperature``, on the exact gold prefix).
A model that copies the viewed operator gives ~1; one that ignores it gives its context-free rate
(~0.5 for a two-way choice).

The first model is the baseline: every other model's mean over the same positions is reported
beside it, with the difference and the ratio. Used in the README to show that the warm start
picks `and`/`or` in `str_replace` independently of the line it viewed (mean 0.496).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import torch

from lego.errors import LegoError

__all__ = ["command", "gold_token_probs", "probe"]


def _token_id(tokenizer: Any, text: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise click.BadParameter(
            f"{text!r} is {len(ids)} tokens for this tokenizer ({ids}); give text that is exactly one token, "
            "e.g. ' and' with its leading space",
            param_hint="--token",
        )
    return int(ids[0])


@torch.no_grad()
def gold_token_probs(model: Any, examples: Sequence[Any], token_ids: set[int], temperature: float = 1.0) -> list[float]:
    """p(gold token | gold prefix) at every assistant position whose gold token is in ``token_ids``,
    in example order (each example: ``ids`` and the assistant ``mask``, as :func:`lego.conductor.sft.tokenize`
    gives)."""
    out: list[float] = []
    for ex in examples:
        rows = [i for i in range(len(ex.ids) - 1) if ex.mask[i + 1] and ex.ids[i + 1] in token_ids]
        if not rows:
            continue
        logits = model(input_ids=torch.tensor([ex.ids], dtype=torch.long)).logits[0, rows].float() / temperature
        gold = torch.tensor([ex.ids[i + 1] for i in rows])
        out += torch.softmax(logits, dim=-1).gather(1, gold[:, None])[:, 0].tolist()
    return out


def probe(
    models: Sequence[str],
    tasks_spec: str,
    where: dict[str, list[str]],
    tokens: Sequence[str],
    temperature: float = 1.0,
    limit: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The probe's JSON: per model the mean, min and count of the gold-token probabilities, and the
    difference from the first model's mean."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lego.conductor.sft import tokenize
    from lego.conductor.sft_data import generate
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model
    from lego.tasks.sources import load_source, select_tasks

    t0 = time.monotonic()
    source = load_source(tasks_spec)
    records = select_tasks(source.records(), where)
    records = records[:limit] if limit else records
    if not records:
        raise LegoError(f"no tasks in {tasks_spec} match {where}")
    tasks = [source.materialize(t) for t in records]
    dirs = [str(resolve_model(m)) for m in models]
    tokenizer = AutoTokenizer.from_pretrained(dirs[0])
    ids = {_token_id(tokenizer, t) for t in tokens}
    examples = tokenize(generate(tasks, seed, variants=1), ChatFormat(tokenizer), max_len=4096)
    per_model: list[dict[str, Any]] = []
    for name, path in zip(models, dirs, strict=True):
        if per_model and AutoTokenizer.from_pretrained(path).get_vocab() != tokenizer.get_vocab():
            raise LegoError(
                f"{name} ({path}) has another tokenizer than {models[0]}: the gold conversations are tokenized "
                "once, with the first model's; probe models of one family together"
            )
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        p = gold_token_probs(model, examples, ids, temperature)
        if not p:
            raise LegoError(f"no assistant position in the gold conversations has a gold token in {list(tokens)}")
        row: dict[str, Any] = {"model": name, "path": path, "mean": sum(p) / len(p), "min": min(p), "positions": len(p)}
        if per_model:  # the same conversations and tokenizer: the same positions as the baseline
            base = per_model[0]["mean"]
            row["minus_baseline"] = row["mean"] - base
            row["ratio_to_baseline"] = row["mean"] / base if base else None
        per_model.append(row)
    return {
        "bench": "probe",
        "tasks": tasks_spec,
        "where": where,
        "tasks_probed": len(tasks),
        "tokens": list(tokens),
        "temperature": temperature,
        "seed": seed,
        "baseline": models[0],
        "models": per_model,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def _parse_where(values: Sequence[str]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: give KEY=VALUE, e.g. 'mutation_kind=and -> or'", param_hint="--where")
        where.setdefault(key.strip(), []).append(value.strip())
    return where


@click.command("probe")
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--tasks", "tasks_spec", default="starter:heldout", show_default=True, help="Task source[:split].")
@click.option(
    "--where",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keep tasks whose metadata KEY is VALUE (repeat: values of one key are alternatives, keys all hold).",
)
@click.option(
    "--token", "tokens", multiple=True, required=True, help="A gold token to score (one tokenizer token; repeat)."
)
@click.option("--temperature", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Probe the first N matching tasks.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write the JSON here.")
def command(
    models: tuple[str, ...],
    tasks_spec: str,
    where: tuple[str, ...],
    tokens: tuple[str, ...],
    temperature: float,
    limit: int | None,
    out: Path | None,
) -> None:
    """Teacher-forced probability each MODEL gives the gold TOKENs of the tasks' gold conversations
    (the first MODEL is the baseline; 'default' is the embedded warm start). Example, the README's:

        lego bench probe default --where 'mutation_kind=and -> or' --where 'mutation_kind=or -> and' --token ' and' --token ' or'
    """
    try:
        result = probe(models, tasks_spec, _parse_where(where), tokens, temperature, limit)
    except LegoError as exc:
        raise click.UsageError(str(exc)) from exc
    text = json.dumps(result, indent=2)
    if out is not None:
        from lego.io import atomic_write_text

        atomic_write_text(out, text + "\n")
    click.echo(text)
