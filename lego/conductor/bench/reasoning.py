"""`lego bench reasoning`: what each reasoning-history policy costs, on the real Qwen3 template.

One thinking, tool-using session (``--queries`` user queries, ``--tool-turns`` tool calls each, then
an answer) is recorded under ``template`` and under ``keep``, driven like an OpenAI client that
drops ``reasoning_content`` (most do). Each sampled turn is what a Qwen3 model following its
template writes (reasoning, then the call or the answer), so the figures are the recorder's, not a
model's. Per policy: segments, tokens stored, the engine's last prompt beside the template's own
rendering of the client's messages (the ideal, what deployment sees), seals, re-prefilled and kept
reasoning tokens; then the trainer's cost, one ``Trainer.step`` over the recorded segments on a
random tiny Qwen3 built on the same tokenizer (median of ``--repeats``), with its Pearson.

Needs the real Qwen3 tokenizer: ``scripts/fetch_tokenizers.sh``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from lego.models.chat import ChatFormat
from lego.proxies.recorder import ReasoningHistory, SessionRecorder
from lego.types import Generation

__all__ = ["TOOLS", "command", "drive_session", "measure"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _sampled(chat: ChatFormat, messages: list[dict[str, Any]], assistant: dict[str, Any], kwargs: Any) -> list[int]:
    """What a model following its template samples for ``assistant`` (through the end of turn)."""
    before = chat.render_text(messages, TOOLS, add_generation_prompt=True, template_kwargs=kwargs)
    after = chat.render_text([*messages, assistant], TOOLS, template_kwargs=kwargs)
    ids = chat.encode(after[len(before) :])
    return ids[: ids.index(chat.end_of_turn_id) + 1]


def drive_session(
    chat: ChatFormat,
    policy: ReasoningHistory,
    queries: int = 2,
    tool_turns: int = 3,
    kwargs: dict[str, Any] | None = None,
) -> tuple[SessionRecorder, list[tuple[list[int], list[int]]]]:
    """Record a thinking, tool-using session whose client drops reasoning_content; return the
    recorder and, per call, (the engine prompt, the template's rendering of the client's messages).
    Logprobs are placeholders (-1.0): the recorder stores, it does not check them."""
    rec = SessionRecorder(chat, reasoning_history=policy)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You fix bugs."}]
    calls = []
    for q in range(queries):
        messages.append({"role": "user", "content": f"Query {q}: tests fail."})
        for t in range(tool_turns + 1):
            intended: dict[str, Any] = {"role": "assistant", "reasoning_content": f"Thinking about step {q}.{t}."}
            if t == tool_turns:
                intended["content"] = f"Done with query {q}."
            else:
                args = json.dumps({"command": f"pytest -k t{q}{t}"})
                call = {"id": "x", "type": "function", "function": {"name": "bash", "arguments": args}}
                intended |= {"content": "", "tool_calls": [call]}
            ids = _sampled(chat, messages, intended, kwargs)
            rendered = rec.render(messages, TOOLS, kwargs)
            calls.append((rendered.prompt_ids, chat.render(messages, TOOLS, True, template_kwargs=kwargs)))
            gen = Generation(token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop", policy_version=0)
            msg = chat.to_message(chat.parse(ids, TOOLS, id_salt=f"{q}.{t}"))
            rec.commit(rendered, gen, msg)
            messages.append({k: v for k, v in msg.items() if k != "reasoning_content"})  # the client drops it
            if t < tool_turns:
                messages.append({"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "1 failed"})
    return rec, calls


def measure(queries: int, tool_turns: int, repeats: int) -> dict[str, Any]:
    import torch

    from lego.algos import PEARSON
    from lego.config import LegoConfig
    from lego.engines.transformers_engine import TransformersEngine
    from lego.models.families import family
    from lego.models.tiny import build_tiny_on
    from lego.training.items import items_from_trajectories
    from lego.training.trainer import Trainer
    from lego.types import Trajectory

    qwen3 = family("qwen3")
    out: dict[str, Any] = {"session": {"queries": queries, "tool_turns_per_query": tool_turns}, "policies": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_on(qwen3.tokenizer_dir(), Path(tmp) / "m", "qwen3")
        chat = ChatFormat.from_pretrained(model_dir)
        engine = TransformersEngine(model_dir, device="cpu", max_batch_size=8, seed=0)
        cfg = LegoConfig.model_validate({"training": {"micro_batch_size": 8, "lr": 1e-5}})
        for policy in ("template", "keep"):
            rec, calls = drive_session(chat, policy, queries, tool_turns)  # type: ignore[arg-type]
            segments = rec.segments()
            # real logprobs for the trainer's fidelity check: teacher-forced by the engine
            scored = []
            for seg in segments:
                (lps,) = engine.score_sync([seg.input_ids], [len(seg.prompt_ids)], 1.0)
                logprobs = [lp if m else None for lp, m in zip(lps, seg.response_mask, strict=True)]
                scored.append(seg.model_copy(update={"response_logprobs": logprobs}))
            traj = Trajectory(trajectory_id=policy, session_id=policy, segments=scored, reward=1.0)
            items = items_from_trajectories([traj], advantages=[1.0])
            times, pearson = [], float("nan")
            for _ in range(repeats):
                trainer = Trainer(model_dir, cfg)
                start = time.perf_counter()
                metrics = trainer.train_step(items)
                times.append(time.perf_counter() - start)
                pearson = metrics[PEARSON]
            counters = rec.summary_counters()
            out["policies"][policy] = {
                "segments": len(segments),
                "stored_tokens": sum(len(s.input_ids) for s in segments),
                "sampled_tokens": sum(s.num_sampled for s in segments),
                "last_prompt_tokens": len(calls[-1][0]),
                "ideal_last_prompt_tokens": len(calls[-1][1]),
                "prompts_equal_template": all(p == i for p, i in calls),
                "reasoning_seals": counters["reasoning_seals"],
                "reprefill_tokens": counters["reprefill_tokens"],
                "kept_reasoning_tokens": counters["kept_reasoning_tokens"],
                "train_step_s_median": statistics.median(times),
                "pearson": pearson,
            }
        out["torch_threads"] = torch.get_num_threads()
    t, k = out["policies"]["template"], out["policies"]["keep"]
    out["template_over_keep"] = {
        "stored_tokens": t["stored_tokens"] / k["stored_tokens"],
        "train_step_s": t["train_step_s_median"] / k["train_step_s_median"],
    }
    return out


@click.command("reasoning")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Write the JSON result here.")
@click.option("--queries", type=click.IntRange(1), default=1, show_default=True)
@click.option("--tool-turns", type=click.IntRange(0), default=19, show_default=True, help="Tool calls per query.")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True)
def command(out: str, queries: int, tool_turns: int, repeats: int) -> None:
    """Segments, stored vs ideal tokens and trainer cost of each reasoning-history policy (real Qwen3 template)."""
    from lego.io import atomic_write_json

    result = measure(queries, tool_turns, repeats)
    atomic_write_json(Path(out), result, indent=2)
    click.echo(json.dumps(result, indent=2))
