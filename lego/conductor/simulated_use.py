"""A simulated person using `lego serve`: the learning-from-use loop driven end to end, no model on their side.

    user = SimulatedUser()
    with UseDriver(cfg, server) as drive:             # server: a started lego.learn.server.LearnServer
        record = drive.session(task, "lego-agent")     # one session: ask, let the agent work, answer, end
        records = drive.sessions(tasks, minutes=30, concurrency=4)

What a person does, and only that: they open a recorded session (`lego serve session new` on the
control face), start their harness in their repo with the issue as the ask (a sandbox of the task
with its tests committed in the tree, :func:`lego.tasks.visible.with_visible_tests`;
the harness's own process pointed at the session's key through the sandbox's bridge to the model
face), wait until the agent says it is done, then run the repo's **visible** tests themselves
(``python3 -m pytest -q`` in the repo, as they would in their terminal) and answer in the same
conversation (:class:`lego.seams.Conversing`: lego-agent's own resume, or mini-swe-agent's own prompt
when it wants to finish, its process kept waiting with its stdin open): a re-query with the
failing tests' report when they fail (:data:`REQUERY`), thanks when they pass (:data:`THANKS`).
Before the harness gets any of their messages (the ask included), they report it on the control
face (``said``): what tells their words from user messages the agent writes into its own harness's
conversation (:mod:`lego.learn.signals`).
After ``rounds`` re-queries, or the thanks, they quit the harness (:meth:`Conversing.end`) and close
the session (`lego serve session end`). A harness that exited on its own (its step limit) takes no
answer: the session ends there, the answer recorded as unheard.

Deterministic: the person's words depend only on what they saw. Nothing here reads a task's
hidden tests or calls the grader: the learner (``lego serve --learn``) trains only on what the
person's replies and the tools' results say, through the judge. Held-out tasks with hidden tests
are for `lego eval` afterwards (:mod:`lego.conductor.bench.use`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lego.config import LegoConfig
from lego.errors import LegoError
from lego.harnesses.base import get_harness
from lego.learn.server import ControlClient, LearnServer
from lego.learn.tool_output import TestRun, parse_test_run
from lego.proxies.server import session_endpoint
from lego.sandboxes.factory import create_sandbox
from lego.seams import Conversing, Harness, PreparedRun, Sandbox
from lego.tasks.visible import with_visible_tests
from lego.types import HarnessLimits, Task

__all__ = ["REQUERY", "THANKS", "SessionRecord", "SimulatedUser", "UseDriver"]

THANKS = "Thanks, that works: the tests pass now."
REQUERY = "It still fails. I ran the tests:\n\n{report}\n\nPlease fix it."
TEST_COMMAND = ["python3", "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider"]
"""What the person runs in the repo (their project's own pytest configuration applies)."""


@dataclass(frozen=True)
class SimulatedUser:
    """The person's side: run the visible tests, say what they see. ``report_chars`` bounds what
    they paste of the test output (the failing tests, their assertion lines, the summary)."""

    test_command: tuple[str, ...] = tuple(TEST_COMMAND)
    report_chars: int = 1200
    test_timeout_s: float = 120.0

    def check(self, sandbox: Sandbox) -> tuple[TestRun | None, str]:
        """Run the repo's visible tests as the person would; the parsed run (None: no test run could
        be read, which the person treats as failing) and the output."""
        res = sandbox.exec(list(self.test_command), timeout=self.test_timeout_s, cwd=sandbox.repo_dir)
        output = (res.stdout or "") + (res.stderr or "")
        return parse_test_run(output), output

    def reply(self, run: TestRun | None, output: str) -> str:
        """Thanks on a green run; otherwise the re-query, with the part of the output a person pastes."""
        if run is not None and run.green:
            return THANKS
        return REQUERY.format(report=self.report(output))

    def report(self, output: str) -> str:
        """The failing tests' ``FAILED``/``ERROR`` lines, their ``E`` lines and the summary (else the output's tail)."""
        lines = output.splitlines()
        keep = [ln for ln in lines if ln.startswith(("E ", "FAILED ", "ERROR "))]
        last = next((ln for ln in reversed(lines) if ln.strip()), "")
        tail = [last] if last and last not in keep else []
        text = "\n".join(keep + tail).strip() or output.strip()[-self.report_chars :] or "(no output)"
        return text[: self.report_chars]


@dataclass
class SessionRecord:
    """What one simulated session did (written to ``sessions.jsonl`` by the bench)."""

    task: str
    harness: str
    session_id: str
    attempts: int = 0
    replies: list[str] = field(default_factory=list)
    green: bool = False
    """The visible tests passed when the person last ran them."""
    ended: list[str] = field(default_factory=list)
    """Each attempt's harness ending (completed, max_turns, timeout, harness_error...)."""
    unheard: str = ""
    """The person's answer when the harness had already exited and could take none (not in ``replies``)."""
    error: str = ""
    """Why the session could not run (sandbox, harness), empty when it ran."""
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class UseDriver:
    """Runs simulated sessions against a started :class:`~lego.learn.server.LearnServer` (see the module doc)."""

    def __init__(
        self,
        cfg: LegoConfig,
        server: LearnServer,
        *,
        user: SimulatedUser | None = None,
        rounds: int = 2,
        max_turns: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if rounds < 0:
            raise LegoError(f"rounds={rounds}: the re-queries a person makes after the first attempt, 0 or more")
        self.cfg, self.server = cfg, server
        self.user = user or SimulatedUser()
        self.rounds = rounds
        self.limits = HarnessLimits(
            max_turns=max_turns if max_turns is not None else cfg.harness.max_turns,
            timeout_s=timeout_s if timeout_s is not None else cfg.harness.timeout_s,
        )
        self.control = ControlClient.connect(server.dir)
        self._harnesses: dict[str, Harness] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> UseDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.control.close()

    def harness(self, name: str) -> Harness:
        with self._lock:
            if name not in self._harnesses:
                adapter = get_harness(name, **self.cfg.harness.options_for(name))
                if not isinstance(adapter, Conversing):
                    raise LegoError(
                        f"harness {name!r} cannot be answered after it finishes (no resume of its conversation): "
                        "a simulated person needs a harness that takes the next message (lego-agent, mini-swe-agent)"
                    )
                self._harnesses[name] = adapter
            return self._harnesses[name]

    def session(self, task: Task, harness_name: str) -> SessionRecord:
        """One person's session on ``task`` with ``harness_name`` (see the module doc); never raises
        for what the agent did, and records why a session could not run."""
        harness = self.harness(harness_name)
        t0 = time.monotonic()
        opened = self.control.new_session(private=False, label=f"simulated: {task.instance_id}")
        sid = opened.row.id
        record = SessionRecord(task=task.instance_id, harness=harness_name, session_id=sid)
        try:
            self._converse(task, harness, opened.key, record)
        except LegoError as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.control.end_session(sid)
            record.wall_s = round(time.monotonic() - t0, 2)
        return record

    def _converse(self, task: Task, harness: Harness, key: str, record: SessionRecord) -> None:
        assert isinstance(harness, Conversing)
        memory_mb = max(self.cfg.sandbox.memory_mb, harness.min_memory_mb)
        sandbox_cfg = self.cfg.sandbox.model_copy(update={"memory_mb": memory_mb})
        proxy_uds = self.server.proxy.model_uds
        if proxy_uds is None:
            raise LegoError("lego serve's model face has no Unix socket for sandboxes to reach")
        task = with_visible_tests(task)  # the person's repo has its tests in it
        sandbox = create_sandbox(sandbox_cfg, task, proxy_uds=Path(proxy_uds), ro_binds=harness.ro_binds())
        try:
            root_url = f"http://127.0.0.1:{sandbox.proxy_port}"
            endpoint = session_endpoint(root_url, record.session_id, key, self.cfg.proxy.served_model_name)
            prepared = harness.prepare(sandbox, endpoint)
            try:
                self._rounds(task, harness, sandbox, prepared, record)
            finally:
                harness.end(sandbox, prepared)  # a harness still at its prompt quits as it offers
        finally:
            sandbox.close()  # as lego.conductor.drive: a sandbox that cannot be closed is an error, not hidden

    def _rounds(
        self, task: Task, harness: Conversing, sandbox: Sandbox, prepared: PreparedRun, record: SessionRecord
    ) -> None:
        """The ask, then per round: the person's test run and their answer, until the thanks, the last
        re-query, or a harness that exited and can take no answer (recorded in ``record.unheard``).
        Each message is reported on the control face before the harness gets it (``said``): the judge
        takes a user message as the person's only if it holds one (the agent can write user messages
        into its harness's conversation; :mod:`lego.learn.signals`)."""
        self.control.said(record.session_id, task.problem_statement)
        result = harness.converse(task, sandbox, prepared, self.limits)
        record.attempts, record.ended = 1, [result.reason]
        last = HarnessLimits(max_turns=1, timeout_s=self.limits.timeout_s)
        for round_ in range(self.rounds + 1):
            if not harness.waiting(prepared):  # a harness at its prompt keeps what it runs: the person's terminal
                sandbox.kill_agent_processes()  # what the agent left running is not the person's test run
            run, output = self.user.check(sandbox)
            message = self.user.reply(run, output)
            record.green = run is not None and run.green
            final = record.green or round_ == self.rounds
            # The person's last words still reach the agent (a real harness sends them): that request
            # is what puts them in the next state of the turn before.
            self.control.said(record.session_id, message)
            answered = harness.reply(sandbox, prepared, last if final else self.limits, message)
            if answered is None:  # the harness had exited (its step limit, a crash): the conversation is over
                record.unheard = message
                break
            record.replies.append(message)
            record.ended.append(answered.reason)
            if final:
                break
            record.attempts += 1

    def sessions(
        self,
        tasks: Sequence[Task],
        harnesses: Sequence[str],
        *,
        minutes: float | None = None,
        count: int | None = None,
        concurrency: int = 1,
        on_session: Callable[[SessionRecord], None] | None = None,
    ) -> list[SessionRecord]:
        """Sessions over ``tasks`` in order (cycling), harnesses in turn, ``concurrency`` at once, until
        ``count`` sessions ran or ``minutes`` passed (the sessions in flight finish)."""
        if not tasks or not harnesses:
            raise LegoError("simulated use needs at least one task and one harness")
        if minutes is None and count is None:
            raise LegoError("simulated use needs a session count or a time budget")
        for name in harnesses:
            self.harness(name)
        deadline = None if minutes is None else time.monotonic() + minutes * 60.0
        done: list[SessionRecord] = []
        started = 0

        def more() -> bool:
            if count is not None and started >= count:
                return False
            return deadline is None or time.monotonic() < deadline

        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="lego-user") as pool:
            running: set[Future[SessionRecord]] = set()
            while running or more():
                while more() and len(running) < max(1, concurrency):
                    task, harness = tasks[started % len(tasks)], harnesses[started % len(harnesses)]
                    running.add(pool.submit(self.session, task, harness))
                    started += 1
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    rec = fut.result()
                    done.append(rec)
                    if on_session is not None:
                        on_session(rec)
        return done
