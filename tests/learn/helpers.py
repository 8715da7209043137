"""What the signal and judge tests share: real test-runner output, and the four APIs driven like their harnesses.

:class:`RealRuns` runs a tiny project's tests for real (pytest red, then green; unittest; a
crashing script), so the parsers read what the runners print. Each driver continues one
conversation through a running `lego serve` the way that API's harnesses do (the official
OpenAI and Anthropic SDKs; Gemini's REST shape with httpx), and hands a command's output back
in the shape that harness writes it (lego-agent, Claude Code, Codex, Gemini CLI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anthropic
import httpx
import openai

from lego.engines.scripted import ScriptedEngine
from lego.learn.server import ControlClient, LearnServer

BASH = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
CALC_BROKEN = "def add(a, b):\n    return a - b\n\n\ndef divide(a, b):\n    return a / b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef divide(a, b):\n    return a / b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
UNITTESTS = (
    "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
    "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"
)


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str


@dataclass(frozen=True)
class RealRuns:
    """Output the real runners printed for a tiny project: ``red`` (pytest, 1 failed 1 passed), ``green``
    (pytest -rA after the fix), ``unittest_red``, ``crash`` (a script raising ZeroDivisionError)."""

    red: Run
    green: Run
    unittest_red: Run
    crash: Run


def _run(cmd: list[str], cwd: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the host's plugins would change what pytest prints
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return Run(done.returncode, done.stdout + done.stderr)


def real_runs(directory: Path) -> RealRuns:
    (directory / "calc.py").write_text(CALC_BROKEN)
    (directory / "test_calc.py").write_text(TESTS)
    (directory / "ut_calc.py").write_text(UNITTESTS)
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_calc.py"]
    red = _run(pytest_cmd, directory)
    unittest_red = _run([sys.executable, "-m", "unittest", "ut_calc"], directory)
    crash = _run([sys.executable, "-c", "import calc; calc.divide(1, 0)"], directory)
    (directory / "calc.py").write_text(CALC_FIXED)
    green = _run([*pytest_cmd, "-rA"], directory)
    return RealRuns(red=red, green=green, unittest_red=unittest_red, crash=crash)


def call(cmd: str) -> str:
    """A scripted policy turn that calls bash (the tiny model's tool-call format)."""
    return f'<tool_call>\n{{"name": "bash", "arguments": {{"cmd": "{cmd}"}}}}\n</tool_call><|im_end|>'


class Driver(Protocol):
    """One conversation on one API, continued as its harnesses do."""

    api: str

    def send(self) -> None:
        """Ask the policy for the next reply and keep it in the conversation."""

    def result(self, run: Run) -> None:
        """Answer the last reply's (only) call with a command's output, in this harness's shape."""

    def say(self, text: str) -> None:
        """The person's next message."""


class ChatDriver:
    """OpenAI chat (official SDK), results in lego-agent's shape: ``exit code N`` then the output."""

    api = "chat"

    def __init__(self, server: LearnServer, key: str, task: str) -> None:
        self.client = openai.OpenAI(base_url=f"{server.model_url}/v1", api_key=key, max_retries=0)
        self.messages: list[Any] = [{"role": "system", "content": "You fix code."}, {"role": "user", "content": task}]
        self.call_id = ""

    def send(self) -> None:
        r = self.client.chat.completions.create(model="m", messages=self.messages, tools=BASH)  # type: ignore[arg-type]
        message = r.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        self.call_id = message.tool_calls[0].id if message.tool_calls else ""

    def result(self, run: Run) -> None:
        text = f"exit code {run.returncode}\n{run.output}"
        self.messages.append({"role": "tool", "tool_call_id": self.call_id, "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


class AnthropicDriver:
    """Anthropic messages (official SDK), results in Claude Code's shape: ``Exit code N`` on a failure."""

    api = "messages"

    def __init__(self, server: LearnServer, key: str, task: str) -> None:
        self.client = anthropic.Anthropic(base_url=server.model_url, api_key=key, max_retries=0)
        self.messages: list[Any] = [{"role": "user", "content": task}]
        self.tools = [
            {"name": "bash", "description": "Run a shell command.", "input_schema": BASH[0]["function"]["parameters"]}
        ]  # type: ignore[index]
        self.use_id = ""

    def send(self) -> None:
        r = self.client.messages.create(
            model="m", max_tokens=128, system="You fix code.", tools=self.tools, messages=self.messages
        )
        self.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
        self.use_id = next((b.id for b in r.content if b.type == "tool_use"), "")

    def result(self, run: Run) -> None:
        text = run.output if run.returncode == 0 else f"Exit code {run.returncode}\n{run.output}"
        block = {"type": "tool_result", "tool_use_id": self.use_id, "content": text, "is_error": run.returncode != 0}
        self.messages.append({"role": "user", "content": [block]})

    def say(self, text: str) -> None:
        # Claude Code sends the person's text with its own reminders beside it.
        reminder = "<system-reminder>The user opened calc.py in the IDE.</system-reminder>"
        self.messages.append({"role": "user", "content": [{"type": "text", "text": f"{reminder}\n{text}"}]})


class ResponsesDriver:
    """OpenAI Responses (official SDK, stateless input), results in Codex's JSON shape."""

    api = "responses"

    def __init__(self, server: LearnServer, key: str, task: str) -> None:
        self.client = openai.OpenAI(base_url=f"{server.model_url}/v1", api_key=key, max_retries=0)
        self.input: list[Any] = [{"role": "user", "content": task}]
        self.tools: Any = [{"type": "function", **BASH[0]["function"]}]  # type: ignore[dict-item]
        self.call_id = ""

    def send(self) -> None:
        r = self.client.responses.create(model="m", instructions="You fix code.", tools=self.tools, input=self.input)
        self.call_id = ""
        for item in r.output:
            if item.type == "function_call":
                self.input.append(
                    {"type": "function_call", "call_id": item.call_id, "name": item.name, "arguments": item.arguments}
                )
                self.call_id = item.call_id
            elif item.type == "message":
                self.input.append({"role": "assistant", "content": r.output_text})

    def result(self, run: Run) -> None:
        output = json.dumps({"output": run.output, "metadata": {"exit_code": run.returncode, "duration_seconds": 0.4}})
        self.input.append({"type": "function_call_output", "call_id": self.call_id, "output": output})

    def say(self, text: str) -> None:
        self.input.append({"role": "user", "content": text})


class GeminiDriver:
    """Gemini generateContent (REST, as Google's clients send it), results in Gemini CLI's shape."""

    api = "gemini"

    def __init__(self, server: LearnServer, key: str, task: str) -> None:
        self.url = f"{server.model_url}/v1beta/models/m:generateContent"
        self.key = key
        decl = {"name": "bash", "description": "Run a shell command.", "parameters": BASH[0]["function"]["parameters"]}  # type: ignore[index]
        self.body: dict[str, Any] = {
            "systemInstruction": {"parts": [{"text": "You fix code."}]},
            "contents": [{"role": "user", "parts": [{"text": task}]}],
            "tools": [{"functionDeclarations": [decl]}],
        }
        self.call: dict[str, Any] = {}

    def send(self) -> None:
        r = httpx.post(self.url, headers={"x-goog-api-key": self.key}, json=self.body, timeout=120)
        assert r.status_code == 200, r.text
        parts = r.json()["candidates"][0]["content"]["parts"]
        self.body["contents"].append({"role": "model", "parts": parts})
        self.call = next((p["functionCall"] for p in parts if "functionCall" in p), {})

    def result(self, run: Run) -> None:
        output = f"Command: pytest\nDirectory: (root)\nOutput: {run.output}\nError: (none)\nExit Code: {run.returncode}"
        response = {"id": self.call["id"], "name": "bash", "response": {"output": output}}
        self.body["contents"].append({"role": "user", "parts": [{"functionResponse": response}]})

    def say(self, text: str) -> None:
        self.body["contents"].append({"role": "user", "parts": [{"text": text}]})


DRIVERS: dict[str, type[ChatDriver | AnthropicDriver | ResponsesDriver | GeminiDriver]] = {
    "chat": ChatDriver,
    "messages": AnthropicDriver,
    "responses": ResponsesDriver,
    "gemini": GeminiDriver,
}


def red_to_green_session(
    served: tuple[LearnServer, ScriptedEngine, ControlClient], api: str, runs: RealRuns, *, end: bool = True
) -> str:
    """A recorded session on ``api``: the agent runs the tests (red), fixes and reruns them (green),
    says it is done, the person thanks it, it answers; then the session ends. Returns its id."""
    server, engine, client = served
    opened = client.new_session(private=False, label=f"red to green on {api}")
    driver = DRIVERS[api](server, opened.key, "fix add() in calc.py")
    engine.push(call("pytest -q"), call("sed -i s/a - b/a + b/ calc.py && pytest -q"))
    engine.push("Fixed: add() adds now and both tests pass.<|im_end|>", "Glad it helped.<|im_end|>")
    driver.send()  # turn 0: run the tests
    driver.result(runs.red)
    driver.send()  # turn 1: fix, rerun
    driver.result(runs.green)
    driver.send()  # turn 2: report
    driver.say("thanks, that works")
    driver.send()  # turn 3: the last word
    if end:
        assert client.end_session(opened.row.id)
    return opened.row.id
