"""The oracle engine: plays a task's gold patch through whatever action format the harness offers.

It proves a harness integration end to end (harness -> proxy -> engine -> sandbox -> grader)
without a capable policy; it never trains. Each call reads the request (``RequestContext``: the
canonical OpenAI messages and tools, and ``answer``: the task's gold patch, which the proxy hands to
this engine alone -- ``open_session(..., answer=task.patch)`` is refused for any engine whose
``capabilities.answer_taker`` is None) and answers with the harness's own way to act:

- a tool-calling harness: one call of its shell tool (a tool named like bash / terminal / shell /
  exec_command whose schema has a ``command``/``cmd`` parameter) that pipes the patch, base64
  encoded so no harness can mangle it, into ``git apply`` (falling back to ``patch -p1``); then
  its own way to finish -- its submit/finish tool, mini-swe-agent's
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` when its prompt asks for that, or else a plain
  final message (OpenCode, Claude Code and Codex end a turn that has no tool call);
- aider (text only, prompt asks for SEARCH/REPLACE blocks): the patch as SEARCH/REPLACE blocks,
  on every call (aider calls again only when the edits did not land yet);
- a script answer (a Harbor task's ``solution/solve.sh``, see :mod:`lego.engines.script_answer`)
  instead of a patch: the same shell call or fenced block, running the script instead of
  ``git apply``; a harness without a shell (aider) cannot play it, which is an error;
- another text-only harness: the command in a fenced block of the language its prompt uses
  (```mswea_bash_command for mini-swe-agent's text mode, ```bash otherwise);
- a side call (title generation, a subagent without a shell): a short plain answer.

The reply text is turned into token ids with the chat format (exactly the ids the template puts
for that assistant message, ending in its end-of-turn token), and each id's logprob comes from a
real model scoring them (``scorer.score``), so recorded logprobs are real numbers. To keep that
affordable on a CPU with harnesses whose prompts run to tens of thousands of tokens, scoring
conditions on the last ``score_context`` prompt tokens only.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol

from lego.config import EngineConfig
from lego.engines.script_answer import ScriptAnswer
from lego.errors import EngineError
from lego.seams import Engine, EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["OracleEngine", "OracleReply", "answer_command", "plan_reply", "search_replace_blocks"]

SHELL_TOOL_NAMES = (
    "bash",
    "terminal",
    "shell",
    "execute_bash",
    "exec_command",
    "shell_command",
    "execute_command",
    "run_shell_command",
    "run_command",
    "local_shell",
)
FINISH_TOOL_NAMES = ("submit", "finish", "task_complete", "attempt_completion", "complete_task")
COMMAND_KEYS = ("command", "cmd", "commands", "script")
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
DONE_TEXT = "I applied the fix to the repository; the task is complete."


class ChatFormatLike(Protocol):
    def render_text(
        self, messages: list[dict[str, Any]], tools: Any = None, add_generation_prompt: bool = False
    ) -> str: ...

    def encode(self, text: str) -> list[int]: ...


class OracleReply:
    """What the oracle says on one call: text content and at most one tool call."""

    def __init__(self, content: str = "", tool: str | None = None, arguments: dict[str, Any] | None = None) -> None:
        self.content = content
        self.tool = tool
        self.arguments = arguments or {}

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool:
            msg["tool_calls"] = [
                {
                    "id": "oracle",
                    "type": "function",
                    "function": {"name": self.tool, "arguments": json.dumps(self.arguments)},
                }
            ]
        return msg

    def __repr__(self) -> str:
        return f"OracleReply(content={self.content[:60]!r}, tool={self.tool!r}, arguments={self.arguments!r})"


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function spec of a tool in OpenAI form ({"function": {...}}) or flat form (name/parameters)."""
    fn = tool.get("function")
    return fn if isinstance(fn, Mapping) else tool


def _properties(fn: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = fn.get("parameters") or fn.get("input_schema") or {}
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def _required_strings(fn: Mapping[str, Any], text: str) -> dict[str, Any]:
    """``text`` for every required string parameter (e.g. OpenCode's bash ``description``)."""
    schema = fn.get("parameters") or fn.get("input_schema") or {}
    required = schema.get("required", []) if isinstance(schema, Mapping) else []
    props = _properties(fn)
    return {k: text for k in required if (props.get(k) or {}).get("type", "string") == "string"}


def find_shell_tool(tools: list[dict[str, Any]]) -> tuple[str, str, bool, dict[str, Any]] | None:
    """``(name, command parameter, it is an argv array, other required arguments)`` of the shell tool."""
    for tool in tools:
        fn = _function(tool)
        name = str(fn.get("name", ""))
        if name.lower() not in SHELL_TOOL_NAMES:
            continue
        props = _properties(fn)
        for key in COMMAND_KEYS:
            if key in props:
                extra = {k: v for k, v in _required_strings(fn, "Apply the fix").items() if k != key}
                return name, key, (props[key] or {}).get("type") == "array", extra
    return None


def find_finish_tool(tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """A submit/finish tool and arguments filling its required string parameters."""
    for tool in tools:
        fn = _function(tool)
        name = str(fn.get("name", ""))
        if name.lower() in FINISH_TOOL_NAMES:
            return name, _required_strings(fn, DONE_TEXT)
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def apply_command(patch: str) -> str:
    """One shell line that applies ``patch`` in the working directory (the repo)."""
    b64 = base64.b64encode(patch.encode()).decode()
    return (
        f"echo {b64} | base64 -d > /tmp/lego_oracle.patch && "
        "(git apply --whitespace=nowarn /tmp/lego_oracle.patch || patch -p1 --forward < /tmp/lego_oracle.patch)"
    )


def search_replace_blocks(patch: str) -> str:
    """The unified diff ``patch`` as aider SEARCH/REPLACE blocks (one per hunk; new files: empty SEARCH)."""
    blocks: list[str] = []
    path = ""
    old: list[str] = []
    new: list[str] = []

    def flush() -> None:
        if path and (old or new):
            body = "".join(line + "\n" for line in old) + "=======\n" + "".join(line + "\n" for line in new)
            blocks.append(f"{path}\n```\n<<<<<<< SEARCH\n{body}>>>>>>> REPLACE\n```\n")
        old.clear()
        new.clear()

    for line in patch.splitlines():
        if line.startswith("diff --git"):
            flush()
        elif line.startswith("+++ "):
            target = line[4:].strip()
            path = target[2:] if target.startswith("b/") else target
        elif line.startswith("--- ") or line.startswith("index ") or line.startswith("new file mode"):
            continue
        elif line.startswith("@@"):
            flush()
        elif line.startswith("\\"):
            continue
        elif line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        elif line.startswith(" ") or line == "":
            old.append(line[1:])
            new.append(line[1:])
    flush()
    return "Here are the changes.\n\n" + "\n".join(blocks)


def answer_command(answer: str) -> tuple[str, str]:
    """``(command, marker)``: the shell line that plays ``answer`` (a patch or a script answer) in the repo,
    and a piece of it that shows, once in the transcript, that it was sent."""
    script = ScriptAnswer.decode(answer)
    if script is not None:
        return script.command(), script.archive[:48]
    return apply_command(answer), base64.b64encode(answer.encode()).decode()[:48]


def plan_reply(context: RequestContext, patch: str) -> OracleReply:
    """Decide the oracle's next action from the conversation so far (stateless: the transcript is the state).
    ``patch`` is the task's answer: a gold patch or a script answer."""
    messages = context.messages
    prompt = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "user"))
    past = json.dumps([m for m in messages if m.get("role") == "assistant"])
    cmd, marker = answer_command(patch)
    applied = bool(patch) and marker in past
    shell = find_shell_tool(context.tools)
    if shell is not None:
        name, key, is_array, extra = shell
        if not applied:
            return OracleReply("I will apply the fix.", name, {key: ["bash", "-lc", cmd] if is_array else cmd, **extra})
        finish = find_finish_tool(context.tools)
        if finish is not None:
            return OracleReply("The fix is applied.", finish[0], finish[1])
        if "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in prompt:
            if MINI_SUBMIT in past:
                return OracleReply(DONE_TEXT)
            args = {key: ["bash", "-lc", MINI_SUBMIT] if is_array else MINI_SUBMIT, **extra}
            return OracleReply("The fix is applied; submitting.", name, args)
        return OracleReply(DONE_TEXT)
    if context.tools:
        return OracleReply(DONE_TEXT)
    if "SEARCH/REPLACE" in prompt:
        if ScriptAnswer.decode(patch) is not None:
            raise EngineError(
                "this task's answer is a script (solution/solve.sh), and this harness edits files with "
                "SEARCH/REPLACE blocks only; play it with a harness that has a shell tool (lego-agent)"
            )
        # aider calls again only when the edits did not land (e.g. "I added these files to the
        # chat", or a block that did not match), so the answer is always the blocks.
        return OracleReply(search_replace_blocks(patch))
    fence = "mswea_bash_command" if "```mswea_bash_command" in prompt else ("bash" if "```bash" in prompt else "")
    if not fence:
        return OracleReply(DONE_TEXT)
    if not applied:
        return OracleReply(f"I will apply the fix.\n\n```{fence}\n{cmd}\n```")
    if "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in prompt:
        return OracleReply(f"Submitting.\n\n```{fence}\n{MINI_SUBMIT}\n```")
    return OracleReply(DONE_TEXT)


class OracleEngine:
    """An :class:`~lego.seams.Engine` that answers with the gold patch; logprobs from ``scorer``.

    ``chat_format`` renders the reply to ids; ``scorer`` is any engine with a real ``score``
    (e.g. the TransformersEngine of the tiny default model). The gold patch comes from
    ``context.answer``: its capability is ``answer_taker`` (the proxy gives a session's answer to this
    engine only). It has no weights of its own to load and never trains.
    """

    def __init__(
        self,
        chat_format: ChatFormatLike,
        scorer: Engine,
        score_context: int = 512,
        max_model_len: int = 1 << 20,
    ) -> None:
        self.chat_format = chat_format
        self.scorer = scorer
        self.score_context = score_context
        self.max_model_len = max_model_len
        self.policy_version = 0

    @classmethod
    def from_config(cls, cfg: EngineConfig) -> OracleEngine:
        """The oracle for ``cfg.model``: replies rendered by that model's chat template, scored by that
        model itself (a TransformersEngine built from the same settings), so its logprobs are real."""
        from lego.engines.transformers_engine import TransformersEngine
        from lego.models.chat import ChatFormat
        from lego.models.tiny import resolve_model

        scorer = TransformersEngine.from_config(cfg)
        return cls(ChatFormat.from_pretrained(resolve_model(cfg.model)), scorer)

    def reply_ids(self, reply: OracleReply) -> list[int]:
        """The ids the chat template puts for ``reply`` as an assistant turn, through its end-of-turn token."""
        base = [{"role": "user", "content": "."}]
        prefix = self.chat_format.render_text(base, add_generation_prompt=True)
        full = self.chat_format.render_text([*base, reply.message()])
        if not full.startswith(prefix):
            raise EngineError("the chat template's assistant turn does not extend its generation prompt")
        turn = full[len(prefix) :]
        end = re.search(r"<\|im_end\|>|<\|endoftext\|>|</s>|<\|eot_id\|>", turn)
        return self.chat_format.encode(turn[: end.end()] if end else turn)

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        """Play the gold patch; a stream gets the whole reply at once (it is planned, not sampled)."""
        start = time.monotonic()
        if context is None or context.answer is None:
            raise EngineError(
                "the oracle engine needs the task's gold patch and this session has none; "
                "open the proxy session with open_session(..., answer=task.patch)"
            )
        reply = plan_reply(context, context.answer)
        ids = self.reply_ids(reply)
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        window = prompt_ids[-self.score_context :] if self.score_context > 0 else []
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0  # greedy: score the plain softmax
        scores = await self.scorer.score([window + ids], [len(window)], temperature)
        logprobs = [float(x) for x in scores[0][-len(ids) :]] if ids else []
        if on_tokens is not None and ids:
            on_tokens(list(ids))
        return Generation(
            token_ids=ids,
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=self.policy_version,
            prompt_tokens=len(prompt_ids),
            engine_time_s=time.monotonic() - start,
        )

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(answer_taker=self)

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return await self.scorer.score(sequences, prompt_lens, temperature)

    async def close(self) -> None:
        await self.scorer.close()
