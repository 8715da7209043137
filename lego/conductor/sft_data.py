"""Warm-start data: multi-turn lego-agent conversations that fix built-in tasks, with real observations.

Why programmatic and not proxied rollouts: a rollout through proxy + sandbox costs seconds, and
the oracle engine only knows one move (pipe the gold patch into ``git apply``), which teaches a
policy nothing about reading code. Here each conversation is *planned* from the gold patch (which
file, which lines, what the fix is) and *executed* by the lego-agent's own ``Agent.step`` on a
private copy of the task's materialised repo, so every observation is exactly what the agent
would print. The layout is the agent's (``FORMAT_VERSION``): its system prompt and task message
with the sandbox repo path (``/repo``), its ``TOOLS``, one tool call per assistant turn, one tool
message per call, ending with ``submit``.

Variation, chosen by a seeded RNG per (seed, task, variant), so generation is deterministic:

- exploration before the edit: ``ls``, ``grep -n`` for the function or a symbol the issue names,
  running the failing check from the issue (a heredoc script: deterministic output, unlike pytest's
  timings), in varying order and number;
- viewing the file whole or a ``view_range`` around the bug;
- a failed edit followed by recovery (an ``old_str`` that does not occur -- wrong indentation or
  the already-fixed text -- or one that occurs several times; the agent's error observation; an
  optional re-view; the correct retry);
- optionally re-running the check after the fix, then ``submit``.

Paths: observations are produced in a temp copy, and the copy's path is replaced by ``/repo`` (the
sandbox's repo dir) so the text matches what the agent sees in a sandbox. :func:`replay` re-executes
a conversation on a fresh copy and checks every observation and the final file state.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

from lego.errors import LegoError
from lego.harnesses.lego_agent.agent import FORMAT_VERSION, SYSTEM_PROMPT, TASK_TEMPLATE, TOOLS, Agent
from lego.sandboxes.layout import REPO_DIR
from lego.types import Task

__all__ = ["FilePatch", "conversation_for", "generate", "gold_file_patch", "replay", "task_repo_copy"]

Message = dict[str, Any]


class FilePatch:
    """The gold patch seen as one file's text before and after, and the smallest unique edit."""

    def __init__(self, path: str, before: str, after: str) -> None:
        self.path, self.before, self.after = path, before, after
        self.old_str, self.new_str, self.line = self._edit()

    def _edit(self) -> tuple[str, str, int]:
        b, a = self.before.splitlines(), self.after.splitlines()
        ops = [op for op in difflib.SequenceMatcher(a=b, b=a, autojunk=False).get_opcodes() if op[0] != "equal"]
        if not ops:
            raise LegoError(f"the gold patch does not change {self.path}")
        b0, b1, a0, a1 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
        # Grow the window with equal context on both sides until old_str is non-empty and unique.
        while True:
            old, new = "\n".join(b[b0:b1]), "\n".join(a[a0:a1])
            if old.strip() and self.before.count(old) == 1:
                return old, new, b0 + 1
            if b0 > 0 and (b1 - b0 < 2 or b1 >= len(b)):
                b0, a0 = b0 - 1, a0 - 1
            elif b1 < len(b):
                b1, a1 = b1 + 1, a1 + 1
            else:
                raise LegoError(f"no unique edit window for {self.path}")


@contextmanager
def task_repo_copy(task: Task) -> Iterator[Path]:
    """A private writable copy of the task's materialised repo (with .git, without caches)."""
    if not task.repo_path:
        raise LegoError(f"task {task.instance_id} has no repo_path; prepare it with its source first")
    tmp = Path(tempfile.mkdtemp(prefix="lego-sft-"))
    try:
        work = tmp / "repo"
        shutil.copytree(task.repo_path, work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        yield work
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def gold_file_patch(task: Task, repo: Path) -> FilePatch:
    """Apply the gold patch to a scratch copy of ``repo`` and read the one file it changes."""
    files = re.findall(r"^\+\+\+ b/(\S+)", task.patch, flags=re.M)
    if len(files) != 1:
        raise LegoError(f"task {task.instance_id}: the generator handles one-file patches, got {files}")
    with tempfile.TemporaryDirectory(prefix="lego-gold-") as tmp:
        scratch = Path(tmp) / "r"
        shutil.copytree(repo, scratch, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        proc = subprocess.run(
            ["patch", "-p1", "--no-backup-if-mismatch", "-s"],
            cwd=scratch,
            input=task.patch,
            text=True,
            capture_output=True,
        )
        if proc.returncode != 0:
            raise LegoError(f"task {task.instance_id}: the gold patch does not apply: {proc.stdout}{proc.stderr}")
        after = (scratch / files[0]).read_text(encoding="utf-8")
    return FilePatch(files[0], (repo / files[0]).read_text(encoding="utf-8"), after)


def _check_script(task: Task) -> str | None:
    """A shell command running the issue's failing check (its code block plus the test file's imports)."""
    code = re.search(r"```python\n(.*?)```", task.problem_statement, flags=re.S)
    node = re.search(r"Running `([^`:]+)::(\w+)`", task.problem_statement)
    if not code or not node:
        return None
    test_file, test_name = node.group(1), node.group(2)
    hunk = re.search(rf"\+\+\+ b/{re.escape(test_file)}\n(.*?)(?=^diff --git|\Z)", task.test_patch, flags=re.S | re.M)
    imports = re.findall(r"^\+((?:from \S+ )?import [^\n]+)$", hunk.group(1), flags=re.M) if hunk else []
    imports = [i for i in imports if "tests." not in i]
    body = code.group(1).rstrip("\n")
    script = "\n".join([*imports, "", body, "", f"{test_name}()", 'print("ok")'])
    return f"python -B - <<'EOF'\n{script}\nEOF"


def _symbols(task: Task) -> list[str]:
    first = task.problem_statement.split("\n\n", 2)
    around = first[1] if len(first) > 1 else ""
    return [s.strip("().") for s in re.findall(r"`([A-Za-z_][\w.]*(?:\(\))?)`", around) if s.strip("().")]


def _call(turn: int, name: str, args: dict[str, Any]) -> Message:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


# How often each optional move of the general plan appears.
_ODDS = {"ls": 0.4, "grep": 0.6, "grep_symbol": 0.5, "check": 0.35, "range": 0.6, "fail": 0.25, "recheck": 0.4}


STARTER_FIND = "grep -rl --include='*.py' def ."
"""The starter plan's first move: list the modules that define something (one per starter repo)."""


def _starter_plan(fp: FilePatch, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """Starter tasks: find the module, view it, swap the operator on the buggy line, submit. Every
    argument is read from the observation just before it (the path from ``grep -l``, the line from the
    view), the distances a few-million-parameter model learns to copy across."""
    path = f"./{fp.path}"
    view: dict[str, Any] = {"command": "view", "path": path}
    fix = {"command": "str_replace", "path": path, "old_str": fp.old_str, "new_str": fp.new_str}
    calls: list[tuple[str, dict[str, Any]]] = [("bash", {"command": STARTER_FIND}), ("str_replace_editor", view)]
    if rng.random() < 0.1:
        calls.append(("str_replace_editor", {**fix, "old_str": _wrong_old(fp, rng)}))
        calls.append(("str_replace_editor", view))
    return [*calls, ("str_replace_editor", fix), ("submit", {})]


def _plan(task: Task, fp: FilePatch, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of one conversation (before execution)."""
    if task.metadata.get("family") == "starter":
        return _starter_plan(fp, rng)
    pkg = fp.path.split("/")[0]
    fn = str(task.metadata.get("function") or "").split(".")[-1]
    syms = _symbols(task)
    explore: list[tuple[str, dict[str, Any]]] = []
    if rng.random() < _ODDS["ls"]:
        explore.append(("bash", {"command": rng.choice(["ls", f"ls {pkg}", "ls -R " + pkg])}))
    if fn and rng.random() < _ODDS["grep"]:
        explore.append(("bash", {"command": f"grep -n 'def {fn}' {fp.path}"}))
    elif syms and rng.random() < _ODDS["grep_symbol"]:
        explore.append(("bash", {"command": f"grep -rn '{rng.choice(syms).split('.')[-1]}' {pkg} | head -n 20"}))
    check = _check_script(task)
    if check and rng.random() < _ODDS["check"]:
        explore.insert(rng.randrange(len(explore) + 1), ("bash", {"command": check}))
    n_lines = len(fp.before.splitlines())
    view: dict[str, Any] = {"command": "view", "path": fp.path}
    if n_lines > 60 or rng.random() < _ODDS["range"]:
        lo = max(1, fp.line - rng.randint(2, 10))
        view["view_range"] = [lo, min(n_lines, fp.line + fp.old_str.count("\n") + rng.randint(2, 10))]
    calls = [*explore, ("str_replace_editor", view)]
    fix = {"command": "str_replace", "path": fp.path, "old_str": fp.old_str, "new_str": fp.new_str}
    if rng.random() < _ODDS["fail"]:
        calls.append(("str_replace_editor", {**fix, "old_str": _wrong_old(fp, rng)}))
        if rng.random() < 0.5:
            calls.append(("str_replace_editor", view))
    calls.append(("str_replace_editor", fix))
    if check and rng.random() < _ODDS["recheck"]:
        calls.append(("bash", {"command": check}))
    calls.append(("submit", {}))
    return calls


def _wrong_old(fp: FilePatch, rng: random.Random) -> str:
    """An old_str the editor rejects: mis-indented, already fixed, or not unique."""
    candidates = [
        "\n".join(line.strip() for line in fp.old_str.splitlines()) + "  ",
        fp.new_str if fp.new_str.strip() and fp.before.count(fp.new_str) == 0 else "",
    ]
    common = [w for w in ("return ", "if ", "self.", " = ") if fp.before.count(w) > 1]
    if common:
        candidates.append(rng.choice(common))
    options = [c for c in candidates if c and fp.before.count(c) != 1]
    return rng.choice(options) if options else fp.old_str + "\n#"


def _agent(work: Path) -> Agent:
    return Agent(
        argparse.Namespace(
            base_url="http://unused/v1", repo=str(work), command_timeout=60.0, max_observation_chars=8000
        )
    )


def _start(task: Task) -> list[Message]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(repo=REPO_DIR)},
        {"role": "user", "content": TASK_TEMPLATE.format(repo=REPO_DIR, problem=task.problem_statement)},
    ]


def _execute(agent: Agent, work: Path, message: Message) -> list[Message]:
    """Run one assistant message through the agent's own step; return its observations (paths as /repo)."""
    agent.messages = []
    with redirect_stderr(io.StringIO()):  # the agent logs each observation to stderr
        agent.step(message)
    out = agent.messages[1:]
    for m in out:
        m["content"] = str(m["content"]).replace(str(work), REPO_DIR)
    return out


def conversation_for(task: Task, seed: int, variant: int = 0) -> dict[str, Any]:
    """One conversation solving ``task`` (the task must have ``repo_path``); deterministic in its arguments."""
    rng = random.Random(f"{seed}:{task.instance_id}:{variant}")
    with task_repo_copy(task) as work:
        fp = gold_file_patch(task, work)
        agent = _agent(work)
        messages = _start(task)
        for turn, (name, args) in enumerate(_plan(task, fp, rng), start=1):
            call = _call(turn, name, args)
            messages.append(call)
            messages.extend(_execute(agent, work, call))
        final = (work / fp.path).read_text(encoding="utf-8")
    if final != fp.after:
        raise LegoError(f"task {task.instance_id}: the planned conversation did not reproduce the gold fix")
    return {
        "format_version": FORMAT_VERSION,
        "instance_id": task.instance_id,
        "seed": seed,
        "variant": variant,
        "messages": messages,
        "tools": TOOLS,
    }


def replay(conversation: dict[str, Any], task: Task) -> tuple[bool, str]:
    """Re-execute the assistant turns on a fresh copy: (every observation identical, final git diff)."""
    same = True
    msgs = conversation["messages"]
    with task_repo_copy(task) as work:
        agent = _agent(work)
        i = 2
        while i < len(msgs):
            observed = _execute(agent, work, msgs[i])
            recorded = msgs[i + 1 : i + 1 + len(observed)]
            same = same and [m["content"] for m in observed] == [m["content"] for m in recorded]
            i += 1 + len(observed)
        diff = subprocess.run(["git", "diff"], cwd=work, text=True, capture_output=True, check=True).stdout
    return same, diff


def generate(tasks: list[Task], seed: int, variants: int = 2, progress: Any = None) -> list[dict[str, Any]]:
    """``variants`` conversations per task (tasks must have ``repo_path``), in task order."""
    out = []
    for task in tasks:
        for v in range(variants):
            out.append(conversation_for(task, seed, v))
            if progress is not None:
                progress()
    return out
