"""Adapter for mini-swe-agent (SWE-agent/mini-swe-agent), run as its own `mini` CLI.

mini-swe-agent v2 talks to models through litellm and, with its default ``mini.yaml``, offers the
model one ``bash`` tool (OpenAI function calling). The agent ends the episode when a command's
output starts with ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``).

Pointed at the proxy by config only: model ``openai/<name>`` with ``model_kwargs.api_base`` set to
the session URL, ``MSWEA_CONFIGURED`` so no first-run wizard, ``LITELLM_LOCAL_MODEL_COST_MAP`` so
litellm fetches nothing, cost tracking off (a local model has no price).

:meth:`MiniSweAgentHarness.run` (training, eval) runs it with ``--exit-immediately``: the episode ends
when the agent submits. A person's conversation (:class:`lego.seams.Conversing`, driven by
:mod:`lego.conductor.simulated_use`) uses mini's own interactive ending instead, as a person at its
terminal does: without ``--exit-immediately`` (``agent.confirm_exit``) mini, when the agent submits,
prints "Agent wants to finish. Type new task or Enter to quit" and reads a line at its prompt
(prompt_toolkit, which reads a pipe as it reads a terminal); a line is the next user message ("The
user added a new task: ..."), an empty one quits. mini has no resume, so its process stays up between
the person's messages: a live command of the sandbox (:class:`lego.seams.LiveSandbox`, the local
backend), kept in the ``PreparedRun``'s ``state``. A message goes as mini's multi-line input: ``/m``,
the text as a bracketed paste (so nothing in it is read as a key: no indentation copied, no early
submit), then Esc-Enter. mini is taken to be at its prompt only when the prompt text appeared since
lego last wrote AND the sandbox says, from the kernel's view of mini's process, that it is blocked
reading its stdin with no child alive (:meth:`lego.seams.LiveCommand.reading_stdin`): the agent's
commands are mini's children and their output is echoed as mini's, so text alone proves nothing.
Each attempt's step budget (``limits.max_turns``) is lego's: mini's own ``step_limit`` counts the
whole conversation, so it is off there, and a step numbered past the attempt's budget in mini's
output kills it (``max_turns``; at most one model call over: mini prints a step once it is answered).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, ClassVar

from lego.errors import HarnessError, LegoError, SandboxError
from lego.harnesses.base import InstalledHarness, log_tail, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import LiveCommand, LiveSandbox, PreparedRun, Sandbox
from lego.types import Endpoint, ExecResult, HarnessLimits, HarnessResult, Task, TerminationLabel

__all__ = ["FINISH_PROMPT", "MiniSweAgentHarness", "typed_message"]

FINISH_PROMPT = b"Agent wants to finish. Type new task or Enter to quit"
"""What mini prints before it reads the person's next line (``confirm_exit``)."""
_STEP = re.compile(rb"^mini-swe-agent \(step (\d+),", re.MULTILINE)
_POLL_S = 0.1
_END_WAIT_S = 30.0


def typed_message(message: str) -> bytes:
    """``message`` as typed at mini's prompt: multi-line mode (``/m``), the text as one bracketed paste,
    Esc-Enter to submit. Control characters other than newlines go (tabs become spaces), so nothing
    in the text can end the paste or act as a key."""
    text = message.replace("\r\n", "\n").replace("\t", "    ")
    text = "".join(ch for ch in text if ch == "\n" or (ch >= " " and ch != "\x7f" and not "\x80" <= ch < "\xa0"))
    if not text.strip():
        raise HarnessError("mini-swe-agent: an empty message quits its session (that is end(), not reply())")
    return b"/m\r\x1b[200~" + text.encode() + b"\x1b[201~\x1b\r"


def _seen(live: LiveCommand, code: int, *, timed_out: bool, t0: float) -> ExecResult:
    """What the conversation's process printed so far, as an exec's result (for its log tail)."""
    return ExecResult(
        exit_code=code,
        stdout=live.output().decode(errors="replace"),
        stderr=live.errors().decode(errors="replace"),
        timed_out=timed_out,
        wall_s=round(time.monotonic() - t0, 3),
    )


def _steps(output: bytes) -> int:
    """The last step number mini printed (it counts the whole conversation's model calls)."""
    return max((int(m.group(1)) for m in _STEP.finditer(output)), default=0)


class MiniSweAgentHarness(InstalledHarness):
    """mini's own ``mini`` CLI: :meth:`run` for an episode, :meth:`converse`/:meth:`reply`/:meth:`end`
    for a person's conversation (see the module doc)."""

    name: ClassVar[str] = "mini-swe-agent"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="pip", package="mini-swe-agent", version="2.4.6", executable="venv/bin/mini", check_args=("--help",)
    )

    def config(self, endpoint: Endpoint, limits: HarnessLimits) -> dict[str, Any]:
        """Overrides merged on top of mini-swe-agent's own ``mini.yaml``."""
        return {
            "agent": {"step_limit": limits.max_turns, "cost_limit": 0, "mode": "yolo", "confirm_exit": False},
            "model": {
                "model_name": f"openai/{endpoint.model}",
                "cost_tracking": "ignore_errors",
                "model_kwargs": {"api_base": endpoint.base_url, "api_key": endpoint.api_key},
            },
            "environment": {"timeout": 60},
        }

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "MSWEA_CONFIGURED": "true",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{home}/.config/mini-swe-agent",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENAI_API_KEY": endpoint.api_key,
            "OPENAI_API_BASE": endpoint.base_url,
            "NO_COLOR": "1",
        }

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        files = {"config": f"{home}/.lego/mini-swe-agent.yaml", "trajectory": f"{home}/.lego/mini.traj.json"}
        return PreparedRun(endpoint=endpoint, home=home, env=self.environment(endpoint, home), files=files)

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        # the config holds the step limit, which only run() knows, so it is written here
        config_path, traj_path = prepared.files["config"], prepared.files["trajectory"]
        self.write_file(sandbox, config_path, json.dumps(self.config(prepared.endpoint, limits), indent=2))
        argv = [self.executable(), "--yolo", "--exit-immediately", "-c", "mini.yaml", "-c", config_path]
        argv += ["-t", task.problem_statement, "-o", traj_path]
        res = self.launch(sandbox, prepared, argv, limits.timeout_s)
        result = result_from_exec(res)
        status = self.exit_status(sandbox, traj_path)
        turns = status.get("api_calls", 0)
        result.turns = int(turns) if isinstance(turns, int | float) else 0
        # Other exit statuses (Submitted, a policy that kept breaking the format) end normally.
        if result.reason == "completed" and status.get("exit_status") == "LimitsExceeded":
            result.reason = "max_turns"
        return result

    def exit_status(self, sandbox: Sandbox, traj_path: str) -> dict[str, Any]:
        """``info.exit_status`` and ``info.model_stats.api_calls`` from mini's trajectory file."""
        try:
            info = json.loads(sandbox.read(traj_path)).get("info", {})
        except (OSError, ValueError, LegoError):
            return {}
        return {"exit_status": info.get("exit_status"), "api_calls": info.get("model_stats", {}).get("api_calls", 0)}

    # --- a person's conversation (lego.seams.Conversing) ---------------------------------------------

    def converse(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        """Start mini without ``--exit-immediately``, its stdin kept open; return when it waits at its
        prompt (verified, see the module doc) or it ended."""
        if not isinstance(sandbox, LiveSandbox):
            raise HarnessError(
                f"mini-swe-agent cannot be answered in a {type(sandbox).__name__}: it has no resume, so its "
                "process must stay up with its stdin open, which only a sandbox backend that runs live commands "
                "offers (sandbox.kind=local)"
            )
        if prepared.state.get("live") is not None:
            raise HarnessError("mini-swe-agent: this PreparedRun already holds a conversation; prepare a new one")
        config_path, traj_path = prepared.files["config"], prepared.files["trajectory"]
        config = self.config(prepared.endpoint, limits)
        config["agent"].update(step_limit=0, confirm_exit=True)  # each attempt's budget is lego's (module doc)
        self.write_file(sandbox, config_path, json.dumps(config, indent=2))
        argv = [self.executable(), "--yolo", "-c", "mini.yaml", "-c", config_path]
        argv += ["-t", task.problem_statement, "-o", traj_path]
        live = sandbox.start(argv, env=dict(prepared.env), cwd=sandbox.repo_dir)
        prepared.state["live"] = live
        return self._until_prompt(sandbox, prepared, live, limits, since=0)

    def waiting(self, prepared: PreparedRun) -> bool:
        live: LiveCommand | None = prepared.state.get("live")
        return live is not None and live.poll() is None

    def reply(
        self, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits, message: str
    ) -> HarnessResult | None:
        """Type ``message`` at mini's prompt (:func:`typed_message`); return at its next verified prompt
        or its end. None when mini had already exited."""
        live: LiveCommand | None = prepared.state.get("live")
        if live is None or live.poll() is not None:
            return None
        typed = typed_message(message)
        since = len(live.output())
        try:
            live.write(typed)
        except SandboxError:
            if live.wait(5) is not None:
                return None  # it exited as the person answered
            raise
        return self._until_prompt(sandbox, prepared, live, limits, since=since)

    def end(self, sandbox: Sandbox, prepared: PreparedRun) -> None:
        """Enter on an empty line, as mini's prompt offers (it saves its trajectory and exits); killed
        if it does not quit, or was not at its prompt."""
        live: LiveCommand | None = prepared.state.pop("live", None)
        if live is None:
            return
        try:
            if live.reading_stdin():
                live.write(b"\r")
                live.wait(_END_WAIT_S)
        except SandboxError:
            pass
        finally:
            live.close()

    def _until_prompt(
        self, sandbox: Sandbox, prepared: PreparedRun, live: LiveCommand, limits: HarnessLimits, *, since: int
    ) -> HarnessResult:
        """Wait until mini waits at its prompt for the person (the prompt text in its output since
        ``since`` and :meth:`~lego.seams.LiveCommand.reading_stdin`, on two polls in a row), it exits,
        the attempt's steps run past ``limits.max_turns`` or ``limits.timeout_s`` passes (killed)."""
        t0 = time.monotonic()
        first = _steps(live.output()[:since])
        held = 0
        while True:
            out = live.output()
            steps = _steps(out) - first
            code = live.poll()
            if code is not None:
                return self._ended(sandbox, prepared, live, code, None, steps, t0)
            if steps > limits.max_turns:
                return self._ended(sandbox, prepared, live, None, "max_turns", limits.max_turns, t0)
            if time.monotonic() - t0 > limits.timeout_s:
                return self._ended(sandbox, prepared, live, None, "timeout", steps, t0)
            held = held + 1 if FINISH_PROMPT in out[since:] and live.reading_stdin() else 0
            if held >= 2:
                seen = _seen(live, 0, timed_out=False, t0=t0)
                return HarnessResult(
                    exit_code=None, reason="completed", logs=log_tail(seen), wall_s=seen.wall_s, turns=steps
                )
            time.sleep(_POLL_S)

    def _ended(
        self,
        sandbox: Sandbox,
        prepared: PreparedRun,
        live: LiveCommand,
        code: int | None,
        killed: TerminationLabel | None,
        steps: int,
        t0: float,
    ) -> HarnessResult:
        """How the conversation's process ended: on its own (``code``), or killed by lego (``killed``)."""
        if killed is not None:
            live.kill()
            code = live.wait(30)
        result = result_from_exec(_seen(live, -9 if code is None else code, timed_out=killed == "timeout", t0=t0))
        result.turns = steps
        if killed is not None:
            result.reason, result.exit_code = killed, None
        elif (
            result.reason == "completed"
            and self.exit_status(sandbox, prepared.files["trajectory"]).get("exit_status") == "LimitsExceeded"
        ):
            result.reason = "max_turns"
        return result
