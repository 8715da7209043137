"""lego-agent: a small tool-calling coding agent that speaks OpenAI chat completions.

This file is self-contained and uses only the Python standard library, because it runs inside a
sandbox with a bare interpreter: the adapter hands this one file to ``python3`` there. Run it as
``python -m lego.harnesses.lego_agent`` or ``python3 agent.py``.

The message format is stable on purpose (a later step fine-tunes a small model on these exact
trajectories); a change to it is a change of ``FORMAT_VERSION``:

- messages[0]  ``system``: :data:`SYSTEM_PROMPT` (the repo path filled in).
- messages[1]  ``user``: :data:`TASK_TEMPLATE` with the problem statement.
- then, per turn, one ``assistant`` message with ``tool_calls`` (or plain content) followed by one
  ``tool`` message per call (``tool_call_id`` set, content = the observation), or, when the reply
  had no usable tool call, one ``user`` message :data:`NO_TOOL_CALL_FEEDBACK`.
- tools: ``bash``, ``str_replace_editor`` and ``submit`` exactly as in :data:`TOOLS`.

``--resume FILE`` goes on with a conversation an earlier run wrote with ``--trajectory-file``: its
messages, then the new ``--problem`` as the person's next ``user`` message, verbatim (what they
say after the agent finished: "it still fails", "thanks"). The file must be of this format version.

The episode ends when the model calls ``submit`` (exit 0), when ``--max-turns`` assistant turns
have passed (exit 10), when the server says the context is full (HTTP 400 naming the context,
exit 11) or on an unrecoverable API error (exit 1). The last stdout line is a JSON status record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["FORMAT_VERSION", "SYSTEM_PROMPT", "TOOLS", "Agent", "main"]

FORMAT_VERSION = 1
EXIT_SUBMITTED, EXIT_ERROR, EXIT_MAX_TURNS, EXIT_OVERLONG = 0, 1, 10, 11

SYSTEM_PROMPT = """You are a software engineer fixing an issue in the repository at {repo}.
You work through tools; every reply must call exactly one tool.
- bash: run a shell command in the repository (non-interactive; each call is a fresh shell).
- str_replace_editor: view a file with line numbers, replace an exact unique string, create a file, or insert text after a line.
- submit: call it once the fix is done; it ends the session.
Find the relevant code, make the smallest correct change, check it (for example by running the tests), then submit.
Do not modify the tests."""

TASK_TEMPLATE = "Fix this issue in the repository at {repo}:\n\n{problem}"

NO_TOOL_CALL_FEEDBACK = (
    "Your reply did not contain a valid tool call. Call exactly one of the tools "
    "bash, str_replace_editor or submit with JSON arguments."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return its exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": (
                "View, edit or create a file. view: show the file with line numbers (view_range [start, end] "
                "optional). str_replace: replace old_str, which must occur exactly once, with new_str. "
                "create: write file_text to a new file. insert: insert new_str after line insert_line (0 = top)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "str_replace", "create", "insert"]},
                    "path": {"type": "string", "description": "File path, relative to the repository or absolute."},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                    "file_text": {"type": "string"},
                    "insert_line": {"type": "integer"},
                    "view_range": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["command", "path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Finish: your changes in the repository are the answer.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


class ContextFullError(Exception):
    """The server refused the request because the conversation no longer fits the model context."""


class ApiError(Exception):
    """The chat completions endpoint failed in a way a retry will not fix."""


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of a long observation; say how much was cut so the model knows."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters truncated ...]\n{text[-half:]}"


class Tools:
    """The environment side: bash and a file editor rooted at the repository."""

    def __init__(self, repo: str, command_timeout: float, max_observation_chars: int) -> None:
        self.repo = repo
        self.command_timeout = command_timeout
        self.limit = max_observation_chars

    def _path(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.repo, path)

    def bash(self, command: str) -> str:
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=self.repo,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.command_timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return f"error: the command timed out after {self.command_timeout:.0f} s; run something shorter"
        out = proc.stdout + (proc.stderr if proc.stderr else "")
        return truncate(f"exit code {proc.returncode}\n{out}", self.limit)

    def editor(self, args: dict[str, Any]) -> str:
        command, path = args.get("command"), args.get("path")
        if not isinstance(path, str) or not path:
            return "error: `path` is required"
        full = self._path(path)
        if command == "view":
            return self._view(full, args.get("view_range"))
        if command == "create":
            text = args.get("file_text")
            if not isinstance(text, str):
                return "error: create needs `file_text`"
            os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
            return f"created {path} ({len(text.splitlines())} lines)"
        if not os.path.isfile(full):
            return f"error: {path} is not a file"
        with open(full, encoding="utf-8", errors="replace") as f:
            content = f.read()
        if command == "str_replace":
            old, new = args.get("old_str"), args.get("new_str", "")
            if not isinstance(old, str) or not old:
                return "error: str_replace needs a non-empty `old_str`"
            count = content.count(old)
            if count != 1:
                return f"error: old_str occurs {count} times in {path}; it must occur exactly once"
            content = content.replace(old, str(new), 1)
        elif command == "insert":
            line, new = args.get("insert_line"), args.get("new_str")
            lines = content.splitlines(keepends=True)
            if not isinstance(line, int) or not 0 <= line <= len(lines) or not isinstance(new, str):
                return f"error: insert needs `new_str` and `insert_line` between 0 and {len(lines)}"
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.insert(line, new if new.endswith("\n") else new + "\n")
            content = "".join(lines)
        else:
            return f"error: unknown command {command!r}; use view, str_replace, create or insert"
        with open(full, "w", encoding="utf-8") as f:
            f.write(content)
        return f"edited {path}"

    def _view(self, full: str, view_range: Any) -> str:
        if os.path.isdir(full):
            names = sorted(os.listdir(full))
            return truncate(
                "\n".join(n + ("/" if os.path.isdir(os.path.join(full, n)) else "") for n in names), self.limit
            )
        if not os.path.isfile(full):
            return f"error: {full} does not exist"
        with open(full, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        start, end = 1, len(lines)
        if isinstance(view_range, list) and len(view_range) == 2 and all(isinstance(x, int) for x in view_range):
            start, end = max(1, view_range[0]), (len(lines) if view_range[1] == -1 else min(len(lines), view_range[1]))
        body = "\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(start, end + 1))
        return truncate(body, self.limit)


class Agent:
    """The loop: ask the model, run its tool call, append the observation, until submit or a limit."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.url = args.base_url.rstrip("/") + "/chat/completions"
        self.tools = Tools(args.repo, args.command_timeout, args.max_observation_chars)
        self.messages: list[dict[str, Any]] = []

    def chat(self) -> dict[str, Any]:
        """One chat completions call, retried on connection errors and 5xx / 429."""
        body = {
            "model": self.args.model,
            "messages": self.messages,
            "tools": TOOLS,
            "temperature": self.args.temperature,
            "max_tokens": self.args.max_tokens,
        }
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.args.api_key}"}
        last = ""
        for attempt in range(self.args.retries + 1):
            if attempt:
                time.sleep(min(2.0**attempt, 30.0))
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.args.request_timeout) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:2000]
                if exc.code == 400 and "context" in detail.lower():
                    raise ContextFullError(detail) from exc
                if exc.code < 500 and exc.code != 429:
                    raise ApiError(f"HTTP {exc.code}: {detail}") from exc
                last = f"HTTP {exc.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise ApiError(f"chat completions failed after {self.args.retries + 1} attempts: {last}")

    def step(self, message: dict[str, Any]) -> bool:
        """Append the assistant message and its observations; return True when it submitted."""
        calls = message.get("tool_calls") or []
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if calls:
            assistant["tool_calls"] = calls
        self.messages.append(assistant)
        if not calls:
            self.messages.append({"role": "user", "content": NO_TOOL_CALL_FEEDBACK})
            return False
        submitted = False
        for call in calls:
            fn = call.get("function") or {}
            name = fn.get("name")
            try:
                args = json.loads(fn.get("arguments") or "{}")
                if not isinstance(args, dict):
                    raise ValueError("arguments must be a JSON object")
            except ValueError as exc:
                observation = f"error: the arguments of {name} are not a valid JSON object ({exc})"
            else:
                if name == "submit":
                    submitted = True
                    observation = "submitted"
                elif name == "bash":
                    command = args.get("command")
                    observation = (
                        self.tools.bash(command) if isinstance(command, str) else "error: `command` is required"
                    )
                elif name == "str_replace_editor":
                    observation = self.tools.editor(args)
                else:
                    observation = f"error: unknown tool {name!r}; use bash, str_replace_editor or submit"
            self.messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": observation})
            log(f"[{name}] {observation[:400]}")
        return submitted

    def run(self, problem: str, history: list[dict[str, Any]] | None = None) -> int:
        if history:
            self.messages = [*history, {"role": "user", "content": problem}]
        else:
            self.messages = [
                {"role": "system", "content": SYSTEM_PROMPT.format(repo=self.args.repo)},
                {"role": "user", "content": TASK_TEMPLATE.format(repo=self.args.repo, problem=problem)},
            ]
        turns = 0
        status, code = "max_turns", EXIT_MAX_TURNS
        try:
            while turns < self.args.max_turns:
                reply = self.chat()
                turns += 1
                message = (reply.get("choices") or [{}])[0].get("message") or {}
                log(f"turn {turns}: {json.dumps(message)[:400]}")
                if self.step(message):
                    status, code = "submitted", EXIT_SUBMITTED
                    break
        except ContextFullError as exc:
            status, code = "overlong", EXIT_OVERLONG
            log(f"context full: {exc}")
        except ApiError as exc:
            status, code = "error", EXIT_ERROR
            log(str(exc))
        finally:
            if self.args.trajectory_file:
                with open(self.args.trajectory_file, "w", encoding="utf-8") as f:
                    json.dump({"format_version": FORMAT_VERSION, "messages": self.messages, "tools": TOOLS}, f)
        print(json.dumps({"lego_agent": status, "turns": turns, "format_version": FORMAT_VERSION}), flush=True)
        return code


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lego-agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-style base URL ending in /v1")
    p.add_argument("--model", default="lego-policy")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "lego-local"))
    task = p.add_mutually_exclusive_group(required=True)
    task.add_argument("--problem", help="the problem statement")
    task.add_argument(
        "--task-file", help="a file holding the problem statement (or a JSON task with problem_statement)"
    )
    p.add_argument("--repo", default=os.getcwd(), help="repository directory (default: the working directory)")
    p.add_argument("--max-turns", type=int, default=30)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=1024, help="completion tokens per turn")
    p.add_argument("--command-timeout", type=float, default=60.0)
    p.add_argument("--max-observation-chars", type=int, default=8000)
    p.add_argument("--request-timeout", type=float, default=600.0)
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--trajectory-file", help="write the final messages here as JSON")
    p.add_argument(
        "--resume",
        metavar="FILE",
        help="go on with the conversation a --trajectory-file holds; --problem is then the user's next message",
    )
    return p.parse_args(argv)


def read_history(path: str) -> list[dict[str, Any]]:
    """The messages of a trajectory this agent wrote (refused: another format version, or no messages)."""
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    if not isinstance(record, dict) or record.get("format_version") != FORMAT_VERSION:
        found = record.get("format_version") if isinstance(record, dict) else None
        raise SystemExit(f"lego-agent: --resume {path}: format version {found!r}, this agent writes {FORMAT_VERSION}")
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SystemExit(f"lego-agent: --resume {path}: no messages to go on with")
    return messages


def read_problem(args: argparse.Namespace) -> str:
    if args.problem is not None:
        return str(args.problem)
    with open(args.task_file, encoding="utf-8") as f:
        text = f.read()
    try:
        record = json.loads(text)
    except ValueError:
        return text
    return str(record["problem_statement"]) if isinstance(record, dict) and "problem_statement" in record else text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.repo = os.path.abspath(args.repo)
    history = read_history(args.resume) if args.resume else None
    return Agent(args).run(read_problem(args), history)


if __name__ == "__main__":
    sys.exit(main())
