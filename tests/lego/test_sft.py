"""Warm-start SFT: the generated conversations are real (replay exactly, fix the task), the loss mask is
exactly the assistant's tokens, and a few updates lower the loss on a fixed batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lego.conductor.sft import Example, masked_loss, tokenize, train_sft
from lego.conductor.sft_data import conversation_for, generate, gold_file_patch, replay, task_repo_copy
from lego.config import SFTConfig
from lego.harnesses.lego_agent.agent import FORMAT_VERSION, SYSTEM_PROMPT, TOOLS
from lego.sandboxes.layout import REPO_DIR
from lego.tasks.sources import BuiltinSource
from lego.types import Task

# One task per kind of edit the generator must handle: a changed line, an added branch, a constant.
TASK_IDS = ["lego-builtin__intervalset-0001", "lego-builtin__matrix-0021", "lego-builtin__roman-0007"]


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    source = BuiltinSource("train")
    by_id = {t.instance_id: t for t in source.records()}
    return [source.materialize(by_id[i]) for i in TASK_IDS]


@pytest.fixture(scope="module")
def conversations(tasks: list[Task]) -> list[dict[str, Any]]:
    return generate(tasks, seed=7, variants=2)


def test_generation_is_deterministic(tasks: list[Task], conversations: list[dict[str, Any]]) -> None:
    again = [conversation_for(t, seed=7, variant=v) for t in tasks for v in range(2)]
    assert json.dumps(again, sort_keys=True) == json.dumps(conversations, sort_keys=True)
    other = [conversation_for(t, seed=8, variant=0) for t in tasks]
    assert [c["messages"] for c in other] != [c["messages"] for c in conversations[::2]]


def test_conversations_use_the_agent_layout(conversations: list[dict[str, Any]]) -> None:
    for conv in conversations:
        msgs = conv["messages"]
        assert conv["format_version"] == FORMAT_VERSION and conv["tools"] == TOOLS
        assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT.format(repo=REPO_DIR)}
        assert msgs[1]["role"] == "user" and msgs[1]["content"].startswith(
            f"Fix this issue in the repository at {REPO_DIR}"
        )
        body = msgs[2:]
        assert [m["role"] for m in body] == ["assistant", "tool"] * (len(body) // 2)
        for call, obs in zip(body[::2], body[1::2], strict=True):
            (tc,) = call["tool_calls"]
            assert obs["tool_call_id"] == tc["id"]
            assert isinstance(json.loads(tc["function"]["arguments"]), dict)
        assert body[-2]["tool_calls"][0]["function"]["name"] == "submit" and body[-1]["content"] == "submitted"
        assert not any("/tmp/" in m["content"] for m in body if m["role"] == "tool")


def test_every_conversation_replays_and_fixes_the_task(tasks: list[Task], conversations: list[dict[str, Any]]) -> None:
    by_id = {t.instance_id: t for t in tasks}
    for conv in conversations:
        task = by_id[conv["instance_id"]]
        same, diff = replay(conv, task)
        assert same, f"{task.instance_id}: an observation differs on replay"
        with task_repo_copy(task) as work:
            fp = gold_file_patch(task, work)
        assert f"+++ b/{fp.path}" in diff
    # Variation: some conversation recovers from a rejected edit, some explores before viewing.
    kinds = {c["instance_id"]: c for c in conversations}
    assert len(kinds) == len(tasks)


def test_a_recovery_conversation_exists_in_a_larger_sample(tasks: list[Task]) -> None:
    convs = [conversation_for(tasks[0], seed=s, variant=0) for s in range(8)]
    observations = [m["content"] for c in convs for m in c["messages"] if m["role"] == "tool"]
    assert any(o.startswith("error: old_str occurs") for o in observations)
    first_calls = {json.loads(c["messages"][2]["tool_calls"][0]["function"]["arguments"]).get("command") for c in convs}
    assert len(first_calls) > 1  # different exploration orders


def test_final_state_passes_the_hidden_tests(tasks: list[Task], conversations: list[dict[str, Any]]) -> None:
    from lego.sandboxes.grading import grade

    _, diff = replay(conversations[0], tasks[0])
    result = grade(tasks[0], diff)
    assert result.resolved, result.log


def _expected_assistant_text(message: dict[str, Any]) -> str:
    parts = []
    for call in message["tool_calls"]:
        fn = call["function"]
        args = json.dumps(json.loads(fn["arguments"]), ensure_ascii=False)
        parts.append(f'<tool_call>\n{{"name": "{fn["name"]}", "arguments": {args}}}\n</tool_call>')
    return message["content"] + "\n".join(parts) + "<|im_end|>"


def test_assistant_mask_covers_exactly_the_assistant_tokens(
    chat_format: Any, conversations: list[dict[str, Any]]
) -> None:
    conv = conversations[1]
    (ex,) = tokenize([conv], chat_format, max_len=100_000)
    assert ex.ids == chat_format.render(conv["messages"], conv["tools"])
    spans: list[list[int]] = []
    for i, (tid, m) in enumerate(zip(ex.ids, ex.mask, strict=True)):
        if m:
            if not spans or not ex.mask[i - 1]:
                spans.append([])
            spans[-1].append(tid)
    expected = [_expected_assistant_text(m) for m in conv["messages"] if m["role"] == "assistant"]
    assert [chat_format.decode(s) for s in spans] == expected


def test_short_sft_lowers_the_loss_on_a_fixed_batch(
    tiny_model_dir: Path, chat_format: Any, conversations: list[dict[str, Any]]
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    # A short task message and no tools block, so a 256-token window holds several assistant turns.
    short = [
        {
            **c,
            "tools": None,
            "messages": [{"role": "user", "content": c["messages"][1]["content"][:80]}, *c["messages"][2:]],
        }
        for c in conversations[:2]
    ]
    examples = tokenize(short, chat_format, max_len=256)
    assert len(examples) == 2 and all(sum(e.mask) > 10 for e in examples)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)

    def batch_loss() -> float:
        with torch.no_grad():
            sums = [masked_loss(model, e) for e in examples]
        return sum(float(s) for s, _ in sums) / sum(n for _, n in sums)

    before = batch_loss()
    losses = train_sft(model, examples, SFTConfig(steps=5, batch=2, lr=3e-3, warmup=1, seed=0))
    after = batch_loss()
    assert len(losses) == 5
    assert after < before - 0.5, (before, after, losses)


def test_masked_loss_counts_only_assistant_positions(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    ex = Example("x", [5, 6, 7, 8, 9], [0, 0, 1, 1, 0])
    loss, n = masked_loss(model, ex)
    assert n == 2 and float(loss.detach()) > 0


def test_sft_help() -> None:
    from lego.conductor.cli.main import cli

    result = CliRunner().invoke(cli, ["sft", "--help"])
    assert result.exit_code == 0, result.output
    assert "--steps" in result.output and "--seed" in result.output


@pytest.mark.slow
def test_run_sft_writes_a_loadable_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from lego.conductor.sft import run_sft
    from lego.models.chat import ChatFormat

    out = run_sft(SFTConfig(limit=2, extra={}, variants=1, steps=1, batch=1, window=256), tmp_path / "warm", quiet=True)
    meta = json.loads((out / "lego_sft.json").read_text())
    assert meta["conversations"] == 2 and len(meta["losses"]) == 1
    AutoModelForCausalLM.from_pretrained(str(out))
    assert ChatFormat.from_pretrained(out).tool_call_format == "hermes"


def test_windowed_examples_end_at_each_assistant_turn(chat_format: Any, conversations: list[dict[str, Any]]) -> None:
    conv = conversations[0]
    (full,) = tokenize([conv], chat_format, max_len=100_000)
    windows = tokenize([conv], chat_format, max_len=100_000, window=200)
    turns = sum(1 for m in conv["messages"] if m["role"] == "assistant")
    assert len(windows) == turns
    for w in windows:
        assert len(w.ids) <= 200 and w.mask[-1] == 1
        assert chat_format.decode(w.ids[-1:]) == "<|im_end|>"
        text = chat_format.decode(full.ids)
        assert chat_format.decode(w.ids) in text


def test_default_resolves_to_a_shipped_warm_start(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    import lego.models.tiny as tiny

    shipped = tmp_path / "warm"
    shutil.copytree(tiny_model_dir, shipped)
    (shipped / "lego_sft.json").write_text('{"config": {"seed": 0}}\n')
    monkeypatch.setattr(tiny, "WARM_DIR", shipped)
    monkeypatch.setenv("LEGO_CACHE_DIR", str(tmp_path / "cache"))
    path = tiny.resolve_model("default")
    assert path.parent == tmp_path / "cache" / "models" and path.name.startswith("warm-")
    assert (path / "model.safetensors").read_bytes() == (shipped / "model.safetensors").read_bytes()
    assert tiny.resolve_model("default") == path
    assert tiny.resolve_model("tiny").name.startswith("tiny-")


def test_sft_is_deterministic_from_the_seed(
    tiny_model_dir: Path, chat_format: Any, conversations: list[dict[str, Any]]
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    examples = tokenize(conversations[:2], chat_format, max_len=100_000, window=128)
    states = []
    for _ in range(2):
        model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
        train_sft(model, examples, SFTConfig(steps=2, batch=2, seed=3))
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
