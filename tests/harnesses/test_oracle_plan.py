"""The oracle's action planning per harness action format, its patch plumbing on a real git repo,
and the round trip of its replies through the real chat format (what the proxy will parse)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lego.engines.oracle import (
    MINI_SUBMIT,
    OracleReply,
    apply_command,
    find_shell_tool,
    plan_reply,
    search_replace_blocks,
)
from lego.harnesses.lego_agent.agent import TOOLS as LEGO_TOOLS
from lego.types import RequestContext

PATCH = "\n".join(
    [
        "diff --git a/calc.py b/calc.py",
        "index 1111111..2222222 100644",
        "--- a/calc.py",
        "+++ b/calc.py",
        "@@ -1,4 +1,4 @@",
        " def add(a, b):",
        "-    return a - b",
        "+    return a + b",
        " ",
        " ",
        "diff --git a/notes.txt b/notes.txt",
        "new file mode 100644",
        "--- /dev/null",
        "+++ b/notes.txt",
        "@@ -0,0 +1 @@",
        "+fixed",
        "",
    ]
)


def fn_tool(name: str, props: dict, required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": "", "parameters": params}}


def after(reply: OracleReply, messages: list[dict]) -> list[dict]:
    """The transcript once the harness ran ``reply`` (its tool result appended)."""
    out = [*messages, reply.message()]
    if reply.tool:
        out.append({"role": "tool", "tool_call_id": "oracle", "content": "ok"})
    return out


def ctx(messages: list[dict], tools: list[dict]) -> RequestContext:
    return RequestContext(messages=messages, tools=tools, answer=PATCH)


START = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix add()."}]


def test_lego_agent_applies_then_submits() -> None:
    first = plan_reply(ctx(START, LEGO_TOOLS), PATCH)
    assert first.tool == "bash" and first.arguments["command"] == apply_command(PATCH)
    second = plan_reply(ctx(after(first, START), LEGO_TOOLS), PATCH)
    assert second.tool == "submit" and second.arguments == {}


def test_mini_swe_agent_finishes_with_its_sentinel_command() -> None:
    tools = [fn_tool("bash", {"command": {"type": "string"}}, ["command"])]
    msgs = [START[0], {"role": "user", "content": "When done run `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`."}]
    first = plan_reply(ctx(msgs, tools), PATCH)
    second = plan_reply(ctx(after(first, msgs), tools), PATCH)
    assert second.tool == "bash" and second.arguments == {"command": MINI_SUBMIT}


def test_openhands_finish_tool_gets_its_required_message() -> None:
    tools = [
        fn_tool("terminal", {"command": {"type": "string"}, "is_input": {"type": "boolean"}}, ["command"]),
        fn_tool("file_editor", {"command": {"type": "string"}, "path": {"type": "string"}}, ["command", "path"]),
        fn_tool("finish", {"message": {"type": "string"}}, ["message"]),
    ]
    first = plan_reply(ctx(START, tools), PATCH)
    assert first.tool == "terminal"
    second = plan_reply(ctx(after(first, START), tools), PATCH)
    assert second.tool == "finish" and set(second.arguments) == {"message"}


def test_opencode_bash_required_description_is_filled_and_it_ends_with_text() -> None:
    tools = [
        fn_tool("bash", {"command": {"type": "string"}, "description": {"type": "string"}}, ["command", "description"])
    ]
    first = plan_reply(ctx(START, tools), PATCH)
    assert set(first.arguments) == {"command", "description"}
    second = plan_reply(ctx(after(first, START), tools), PATCH)
    assert second.tool is None and second.content


def test_argv_shell_tool_gets_an_argv() -> None:
    tools = [fn_tool("shell", {"command": {"type": "array", "items": {"type": "string"}}}, ["command"])]
    assert find_shell_tool(tools) == ("shell", "command", True, {})
    first = plan_reply(ctx(START, tools), PATCH)
    assert first.arguments["command"][:2] == ["bash", "-lc"]


def test_side_calls_without_a_shell_get_plain_text() -> None:
    title = plan_reply(ctx([{"role": "user", "content": "Write a 5-word title"}], []), PATCH)
    assert title.tool is None and "```" not in title.content
    read_only = plan_reply(ctx(START, [fn_tool("Read", {"path": {"type": "string"}}, ["path"])]), PATCH)
    assert read_only.tool is None


def test_aider_gets_search_replace_blocks_until_they_land() -> None:
    msgs = [{"role": "system", "content": "Describe each change with a *SEARCH/REPLACE block*."}, START[1]]
    first = plan_reply(ctx(msgs, []), PATCH)
    assert "<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n\n\n=======\n" in first.content
    assert "notes.txt\n```\n<<<<<<< SEARCH\n=======\nfixed\n>>>>>>> REPLACE" in first.content
    added = [*after(first, msgs), {"role": "user", "content": "I added these files to the chat: calc.py"}]
    assert plan_reply(ctx(added, []), PATCH).content == first.content


def test_text_mode_uses_the_prompts_fence() -> None:
    msgs = [START[0], {"role": "user", "content": "Reply with ```mswea_bash_command\n...\n```"}]
    first = plan_reply(ctx(msgs, []), PATCH)
    assert first.content.endswith(f"```mswea_bash_command\n{apply_command(PATCH)}\n```")


def test_apply_command_applies_the_patch_in_a_real_repo(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    out = subprocess.run(["bash", "-c", apply_command(PATCH)], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "return a + b" in (tmp_path / "calc.py").read_text()
    assert (tmp_path / "notes.txt").read_text() == "fixed\n"


def test_search_replace_blocks_name_each_file() -> None:
    text = search_replace_blocks(PATCH)
    assert text.count("<<<<<<< SEARCH") == 2 and text.count(">>>>>>> REPLACE") == 2


@pytest.mark.parametrize("tools", [LEGO_TOOLS, []])
def test_replies_round_trip_through_the_chat_format(chat_format, tools: list[dict]) -> None:
    from lego.engines.oracle import OracleEngine

    engine = OracleEngine(chat_format, scorer=None)  # type: ignore[arg-type]  # reply_ids needs no scorer
    reply = plan_reply(ctx(START, tools), PATCH)
    ids = engine.reply_ids(reply)
    assert ids[-1] == chat_format.im_end_id
    parsed = chat_format.parse(ids, tools=tools)
    assert not parsed.parse_errors
    if reply.tool:
        assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [(reply.tool, reply.arguments)]
    else:
        assert parsed.content == reply.content.strip() and not parsed.tool_calls
