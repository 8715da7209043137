"""lego-agent's environment side (bash and the file editor) and its message handling, run for real."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lego.harnesses.lego_agent.agent import NO_TOOL_CALL_FEEDBACK, Agent, Tools, parse_args, truncate


def tools(tmp_path: Path, limit: int = 8000) -> Tools:
    return Tools(str(tmp_path), command_timeout=5, max_observation_chars=limit)


def test_bash_runs_in_the_repo_and_reports_the_exit_code(tmp_path: Path) -> None:
    out = tools(tmp_path).bash("pwd; echo err >&2; exit 3")
    assert out.startswith("exit code 3\n") and str(tmp_path) in out and "err" in out


def test_bash_times_out_and_truncates(tmp_path: Path) -> None:
    assert "timed out" in tools(tmp_path).bash("sleep 30")
    out = tools(tmp_path, limit=100).bash("seq 1 10000")
    assert "characters truncated" in out and len(out) < 200


def test_truncate_keeps_head_and_tail() -> None:
    text = "a" * 50 + "b" * 50
    cut = truncate(text, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters" in cut


def test_editor_create_view_replace_insert(tmp_path: Path) -> None:
    t = tools(tmp_path)
    assert t.editor({"command": "create", "path": "pkg/m.py", "file_text": "a = 1\nb = 2\n"}).startswith("created")
    assert t.editor({"command": "view", "path": "pkg/m.py"}) == "     1\ta = 1\n     2\tb = 2"
    assert t.editor({"command": "view", "path": "pkg/m.py", "view_range": [2, 2]}) == "     2\tb = 2"
    assert (
        t.editor({"command": "str_replace", "path": "pkg/m.py", "old_str": "b = 2", "new_str": "b = 3"})
        == "edited pkg/m.py"
    )
    assert (
        t.editor({"command": "insert", "path": "pkg/m.py", "insert_line": 0, "new_str": "# top"}) == "edited pkg/m.py"
    )
    assert (tmp_path / "pkg/m.py").read_text() == "# top\na = 1\nb = 3\n"
    assert "pkg/" in t.editor({"command": "view", "path": "."})


def test_editor_errors_say_what_to_do(tmp_path: Path) -> None:
    t = tools(tmp_path)
    (tmp_path / "f.py").write_text("x\nx\n")
    assert "occurs 2 times" in t.editor({"command": "str_replace", "path": "f.py", "old_str": "x", "new_str": "y"})
    assert "occurs 0 times" in t.editor({"command": "str_replace", "path": "f.py", "old_str": "z", "new_str": "y"})
    assert "not a file" in t.editor({"command": "str_replace", "path": "nope.py", "old_str": "z"})
    assert "unknown command" in t.editor({"command": "delete", "path": "f.py"})
    assert "`insert_line` between 0 and 2" in t.editor(
        {"command": "insert", "path": "f.py", "insert_line": 9, "new_str": "q"}
    )


def agent(tmp_path: Path) -> Agent:
    args: argparse.Namespace = parse_args(
        ["--base-url", "http://127.0.0.1:9/v1", "--problem", "p", "--repo", str(tmp_path)]
    )
    return Agent(args)


def test_a_reply_without_tool_calls_gets_the_feedback_message(tmp_path: Path) -> None:
    a = agent(tmp_path)
    assert a.step({"role": "assistant", "content": "I think..."}) is False
    assert a.messages == [
        {"role": "assistant", "content": "I think..."},
        {"role": "user", "content": NO_TOOL_CALL_FEEDBACK},
    ]


def test_tool_calls_produce_tool_messages_and_submit_ends(tmp_path: Path) -> None:
    a = agent(tmp_path)
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "echo hi"})}},
        {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{not json"}},
        {"id": "c3", "type": "function", "function": {"name": "rm_rf", "arguments": "{}"}},
    ]
    assert a.step({"role": "assistant", "content": "", "tool_calls": calls}) is False
    observations = [m["content"] for m in a.messages if m["role"] == "tool"]
    assert observations[0] == "exit code 0\nhi\n"
    assert "not a valid JSON object" in observations[1] and "unknown tool 'rm_rf'" in observations[2]
    assert [m.get("tool_call_id") for m in a.messages[1:]] == ["c1", "c2", "c3"]
    submit = [{"id": "c4", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]
    assert a.step({"role": "assistant", "content": None, "tool_calls": submit}) is True


def test_unreachable_server_ends_with_error_status(tmp_path: Path, capsys) -> None:
    args = parse_args(
        ["--base-url", "http://127.0.0.1:9/v1", "--problem", "p", "--repo", str(tmp_path), "--retries", "0"]
    )
    assert Agent(args).run("p") == 1
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == {"lego_agent": "error", "turns": 0, "format_version": 1}


# The sha256 of lego-agent's prompts and tool schemas at FORMAT_VERSION 1. Trajectories of this
# exact format are fine-tuning data: changing any of them must bump FORMAT_VERSION and this pin.
FORMAT_1_SHA256 = "1fb3590ef0d0029bdf948fa816b1df7f10316cc88ff6f9cae2142813eb3262b3"


def test_message_format_is_pinned_to_its_version() -> None:
    import hashlib

    from lego.harnesses.lego_agent.agent import FORMAT_VERSION, SYSTEM_PROMPT, TASK_TEMPLATE, TOOLS

    blob = json.dumps([SYSTEM_PROMPT, TASK_TEMPLATE, NO_TOOL_CALL_FEEDBACK, TOOLS], sort_keys=True).encode()
    assert (FORMAT_VERSION, hashlib.sha256(blob).hexdigest()) == (1, FORMAT_1_SHA256)
