"""Next-state signals: for each recorded turn, what followed it -- read from what the store already holds.

    row = store.session("s-1")
    turns = list(store.iter_turns(session_id="s-1"))
    for state in session_signals(turns, ended=row.ended_at is not None, said=store.said("s-1")):
        state.tool_results     # each result answering the reply's calls: exit code, test run, traceback
        state.user_message     # what the person said next (None: nothing, or the session ended)
        state.unrecorded_user_messages  # user-role text that followed and that the person never said
        state.feedback         # their explicit verdicts on the turn
        state.tests_before     # the last test run the thread had seen before (red -> green needs it)
        state.session_tests    # end of session: the last test run, on the main thread's last turn
        state.episode_reply    # the person's reply to the attempt this turn was a step of
        state.asked            # what the person last asked before the turn (their words only)

**Where a next state is.** A turn's request carries the thread's conversation so far. The reply
went back to the harness, which acted on it and sent the thread's next request with the reply and
what followed appended: the results of its tool calls, then (when the agent stopped to answer)
the person's next message. So a turn's next state is read from the *next turn of its thread*:
the messages after the reply in that request, up to the next assistant message. The reply is
found there as the proxy found it (by the tool-call ids it returned, else by its text): at the
position the turn's own request ends when the harness echoed the history verbatim, else wherever
it last appears. A later turn whose request does not hold the reply at all (the harness compacted
or rewrote history) leaves the next state unknown (``unmatched``), never guessed.

**An attempt's reply.** An agent works in steps (edit, run, edit, "done") and the person answers
the attempt, not the step: their message lands in the next state of the attempt's last turn only.
Every earlier turn of the attempt -- each turn of the thread since the person last spoke -- gets
that message as its ``episode_reply`` (judges credit the steps with the outcome; a hint for
hindsight distillation reaches the edit that caused it).

A thread's last turn has nothing after it yet: ``pending`` while its session may still get turns,
``ended`` once the session ended (:meth:`~lego.learn.store.SqliteStore.end_session`), when its next
state is the session's end state.

**Per API.** The store keeps every API's messages in the proxy's canonical (OpenAI chat) shape,
so the four differ only in what a tool result's text is: OpenAI chat, a ``tool`` message's
content (a string or text parts); Anthropic messages, the ``tool_result`` block's text (the face
joined its parts; its ``is_error`` flag is not kept, harnesses write the failure into the text);
OpenAI Responses, ``function_call_output.output``, which Codex fills with a JSON object
(``{"output": ..., "metadata": {"exit_code": ...}}``); Gemini, ``functionResponse.response``, a JSON
object by the API's definition (Gemini CLI: ``{"output": "...Exit Code: 1..."}``). The JSON ones
are unpacked (:func:`result_text`). Results match calls by ``tool_call_id`` (every face keeps the
API's id), else by position among the calls not yet answered. mini-swe-agent's text actions come
back as a user message ``<returncode>N</returncode><output>...``: that is read as the result of
the reply's action, not as the person speaking.

**Whose words.** A harness sends the person's messages as ``user`` messages, but the agent runs in
the harness's sandbox as the harness's own uid: it can put a ``user`` message in the harness's next
request that the person never wrote (lego-agent's conversation file is the agent's to edit; a
process that takes over mini-swe-agent can type at its prompt). So when the person's side reports
what it sends (``said``: the control face's ``POST /s/{session}/said``, which the simulated person
always uses, :meth:`~lego.learn.store.SqliteStore.said`), a user message that followed a turn is the
person's only when it holds one of those messages (whitespace and control characters aside:
harnesses add prefixes, such as mini's "The user added a new task: ") that was recorded before the
request carrying it, each recorded message taken once, in the order requests came; ``user_message``
is then the *recorded* text, not the message (words appended to a real message are not the
person's). A user message holding none is not the person's: it is kept in
``unrecorded_user_messages`` (a harness's own notes land there too) and no person's rule reads it.
A session with nothing recorded (a person typing into an unmodified harness) reads user messages
as before: the first one that followed is the person's.

**What is read from a result** (:mod:`lego.learn.tool_output`): an exit code, a test run, the last
Python traceback. A person's message is kept as they wrote it, less Claude Code's
``<system-reminder>`` blocks (the harness's, not theirs).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from lego.learn.records import Feedback, Said, TurnRecord
from lego.learn.tool_output import PyTraceback, TestRun, exit_code, parse_test_run, parse_traceback

__all__ = ["NextState", "ToolCall", "ToolResult", "result_text", "session_signals"]

NextStateStatus = Literal["followed", "ended", "pending", "unmatched"]


@dataclass(frozen=True)
class ToolCall:
    """A call the reply made (OpenAI chat shape): its id, the tool's name, the arguments as sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolResult:
    """What came back for one of the reply's calls. ``call`` None: more results than calls;
    ``matched_by``: ``id`` (the result named the call), ``position`` (it did not; the first call
    not yet answered), ``observation`` (a text action's result sent as a user message)."""

    call: ToolCall | None
    matched_by: Literal["id", "position", "observation"]
    text: str
    exit_code: int | None
    test_run: TestRun | None
    traceback: PyTraceback | None

    @property
    def failed(self) -> bool:
        """The command failed: a non-zero exit code, or a traceback where no exit code shows."""
        if self.exit_code is not None:
            return self.exit_code != 0
        return self.traceback is not None

    def to_json(self, excerpt: int) -> dict[str, Any]:
        return {
            "call": None if self.call is None else {"id": self.call.id, "name": self.call.name},
            "matched_by": self.matched_by,
            "exit_code": self.exit_code,
            "test_run": None if self.test_run is None else self.test_run.to_json(),
            "traceback": None
            if self.traceback is None
            else {"type": self.traceback.exc_type, "message": self.traceback.message},
            "text": _excerpt(self.text, excerpt),
        }


@dataclass(frozen=True)
class NextState:
    """What followed one turn (see the module docstring).

    ``status``: ``followed`` (read from the thread's turn ``next_turn``), ``ended`` (the thread's
    last turn, its session over), ``pending`` (the last turn so far of a session still open: a
    judge waits) or ``unmatched`` (a later turn exists but its request does not hold this reply).
    ``tests_before``: the last test run among the results in the turn's own request (what the
    thread had seen when the policy acted). ``session_tests``: on the main thread's last turn of an
    ended session, the test run its last tool results showed (the end state), else None.
    ``episode_reply``: for a turn whose own next state holds no message of the person, the first one
    that came later in its thread -- the reply to the attempt this turn was a step of (the edit
    before the agent said "done" is what the person's "still fails" is about), else None.
    ``unrecorded_user_messages``: the user messages that followed the turn and hold none of the
    person's recorded messages (only in a session that records them; see the module docstring).
    ``asked``: what the person last asked before the turn -- the last user message of the turn's own
    request that is theirs (by the same rule), else None. Read from the turn, not from what followed,
    so it is not part of :meth:`to_json` (a judge that shows it, shows it beside the state).
    ``attempt_steps``: on a turn whose next state holds the person's message (the turn that closed an
    attempt), how many turns of its thread the attempt took, itself included; 0 on the others. Not
    part of :meth:`to_json` either: it says where the turn sits, not what followed it."""

    session_id: str
    turn: int
    thread: str
    main: bool
    api: str
    status: NextStateStatus
    next_turn: int | None
    tool_calls: tuple[ToolCall, ...]
    tool_results: tuple[ToolResult, ...]
    user_message: str | None
    feedback: tuple[Feedback, ...]
    tests_before: TestRun | None
    session_tests: TestRun | None = None
    episode_reply: str | None = None
    unrecorded_user_messages: tuple[str, ...] = ()
    asked: str | None = None
    attempt_steps: int = 0

    @property
    def known(self) -> bool:
        """Whether what followed the turn is settled (a judge may judge it)."""
        return self.status in ("followed", "ended", "unmatched")

    @property
    def tests(self) -> TestRun | None:
        """The last test run among the turn's results."""
        runs = [r.test_run for r in self.tool_results if r.test_run is not None]
        return runs[-1] if runs else None

    def to_json(self, excerpt: int = 2000) -> dict[str, Any]:
        """The state as a judge's input (each result's text cut to ``excerpt`` characters, head and tail)."""
        out: dict[str, Any] = {
            "session_id": self.session_id,
            "turn": self.turn,
            "thread_main": self.main,
            "api": self.api,
            "status": self.status,
            "next_turn": self.next_turn,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": _excerpt(c.arguments, excerpt)} for c in self.tool_calls
            ],
            "tool_results": [r.to_json(excerpt) for r in self.tool_results],
            "user_message": self.user_message,
            "feedback": [{"score": f.score, "text": f.text, "created_at": f.created_at} for f in self.feedback],
            "tests_before": None if self.tests_before is None else self.tests_before.to_json(),
            "session_tests": None if self.session_tests is None else self.session_tests.to_json(),
        }
        if self.episode_reply is not None:  # absent rather than null: older verdicts' fingerprints hold
            out["episode_reply"] = self.episode_reply
        if self.unrecorded_user_messages:  # likewise absent when there are none
            out["unrecorded_user_messages"] = [_excerpt(m, excerpt) for m in self.unrecorded_user_messages]
        return out


# ---------------------------------------------------------------------- per API: a result's text
def _content_text(content: Any) -> str:
    """A canonical message's content as text (a string, or OpenAI text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


_EXIT_FIELDS = ("exit_code", "exitCode", "returncode", "return_code")
_TEXT_FIELDS = ("output", "stdout", "stderr", "result", "content", "llmContent", "error")


def _unpack_json(text: str) -> tuple[str, int | None]:
    """A JSON object's text fields joined and its exit-code field; a text that is no object as it is."""
    try:
        obj = json.loads(text)
    except ValueError:
        return text, None
    if not isinstance(obj, dict):
        return text, None
    code: int | None = None
    for holder in (obj, obj.get("metadata")):
        if isinstance(holder, dict):
            for key in _EXIT_FIELDS:
                value = holder.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and code is None:
                    code = value
    parts = [obj[k] for k in _TEXT_FIELDS if isinstance(obj.get(k), str) and obj[k]]
    return ("\n".join(parts) if parts else text), code


def result_text(api: str, content: Any) -> tuple[str, int | None]:
    """A tool message's text and the exit code a structured result states, as each API carries it
    (see the module docstring): Gemini and Responses results may be JSON objects, unpacked."""
    text = _content_text(content)
    if api in ("gemini", "responses") and text.lstrip().startswith("{"):
        return _unpack_json(text)
    return text, None


def _tool_result(api: str, content: Any, call: ToolCall | None, matched_by: Any) -> ToolResult:
    text, code = result_text(api, content)
    return ToolResult(
        call=call,
        matched_by=matched_by,
        text=text,
        exit_code=code if code is not None else exit_code(text),
        test_run=parse_test_run(text),
        traceback=parse_traceback(text),
    )


# ---------------------------------------------------------------------- finding what followed
_SYSTEM_REMINDER = re.compile(r"<system-reminder>[\s\S]*?</system-reminder>")
_OBSERVATION = re.compile(r"\A\s*<returncode>[ \t]*-?\d+[ \t]*</returncode>")


def _calls(reply: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    out = []
    for c in reply.get("tool_calls") or []:
        fn = c.get("function") or {}
        args = fn.get("arguments", "")
        out.append(
            ToolCall(
                id=str(c.get("id", "")),
                name=str(fn.get("name", "")),
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
        )
    return tuple(out)


def _is_reply(message: Mapping[str, Any], reply: Mapping[str, Any]) -> bool:
    """Whether ``message`` is the harness's echo of ``reply`` (the proxy's rule: call ids, else text)."""
    if message.get("role") != "assistant":
        return False
    ours = sorted(c.id for c in _calls(reply))
    theirs = sorted(str(c.get("id")) for c in message.get("tool_calls") or [])
    if ours:
        return ours == theirs
    return not theirs and _content_text(message.get("content")).strip() == _content_text(reply.get("content")).strip()


def _following(turn: TurnRecord, after: TurnRecord) -> list[dict[str, Any]] | None:
    """The messages of ``after``'s request that followed ``turn``'s reply (None: the reply is not there)."""
    messages = after.messages
    n = len(turn.messages)
    if len(messages) > n and messages[:n] == turn.messages and _is_reply(messages[n], turn.reply):
        start = n + 1
    else:
        hits = [i for i, m in enumerate(messages) if _is_reply(m, turn.reply)]
        if not hits:
            return None
        start = hits[-1] + 1
    out = []
    for m in messages[start:]:
        if m.get("role") == "assistant":
            break
        out.append(m)
    return out


def _normalized(text: str) -> str:
    """``text`` with control characters dropped and whitespace runs as one space (how a harness may
    pass a message on: mini types it at its prompt, tabs as spaces, control characters gone, stripped)."""
    kept = "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) != "Cc")
    return " ".join(kept.split())


class _Person:
    """What the person's side recorded saying in one session (see the module docstring): each message is
    found in at most one user message, one recorded before the request that carried it."""

    def __init__(self, said: Sequence[Said]) -> None:
        self._said = [(norm, s.text, s.created_at) for s in said if (norm := _normalized(s.text))]
        self._taken = [False] * len(self._said)

    def __bool__(self) -> bool:
        return bool(self._said)

    def take(self, message: str, at: float) -> str | None:
        """The recorded message ``message`` holds (the longest, recorded by ``at``, not taken before), taken; None: none."""
        text = _normalized(message)
        found = [
            i
            for i, (norm, _, created) in enumerate(self._said)
            if not self._taken[i] and created <= at and norm in text
        ]
        if not found:
            return None
        best = max(found, key=lambda i: (len(self._said[i][0]), -i))
        self._taken[best] = True
        return self._said[best][1]

    def holds(self, message: str, at: float) -> str | None:
        """The longest recorded message (recorded by ``at``) that ``message`` holds, taken or not; None: none."""
        text = _normalized(message)
        found = [i for i, (norm, _, created) in enumerate(self._said) if created <= at and norm in text]
        return self._said[max(found, key=lambda i: (len(self._said[i][0]), -i))][1] if found else None


def _asked(messages: list[dict[str, Any]], person: _Person, at: float) -> str | None:
    """What the person last asked before a turn: the last user message of its request that is theirs
    (with a record of what they said, the recorded text it holds; else the message, less the harness's
    reminders), never a tool's observation (mini-swe-agent's results come as user messages)."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        text = _content_text(m.get("content"))
        if _OBSERVATION.match(text):
            continue
        spoken = _SYSTEM_REMINDER.sub("", text).strip()
        if not spoken:
            continue
        if not person:
            return spoken
        recorded = person.holds(spoken, at)
        if recorded is not None:
            return recorded.strip()
    return None


def _read_following(
    api: str,
    calls: tuple[ToolCall, ...],
    messages: list[dict[str, Any]],
    person: _Person | None = None,
    at: float = 0.0,
) -> tuple[tuple[ToolResult, ...], str | None, tuple[str, ...]]:
    """The results answering ``calls``, the person's next message and the user messages that are not
    theirs, from the messages that followed. ``person``: what the session recorded the person saying
    (None or empty: the first user message is theirs), ``at`` the time of the request that carried them."""
    by_id = {c.id: c for c in calls}
    answered: set[str] = set()
    results: list[ToolResult] = []
    user: str | None = None
    unrecorded: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            call = by_id.get(str(m.get("tool_call_id")))
            how = "id"
            if call is None or call.id in answered:
                call = next((c for c in calls if c.id not in answered), None)
                how = "position"
            if call is not None:
                answered.add(call.id)
            results.append(_tool_result(api, m.get("content"), call, how))
        elif role == "user" and (user is None or person):
            text = _content_text(m.get("content"))
            if not calls and not results and _OBSERVATION.match(text):
                results.append(_tool_result(api, text, None, "observation"))
                continue
            spoken = _SYSTEM_REMINDER.sub("", text).strip()
            if not spoken:
                continue
            if not person:
                user = spoken
                continue
            recorded = person.take(spoken, at)
            if recorded is None:
                unrecorded.append(spoken)
            elif user is None:
                user = recorded.strip()
    return tuple(results), user, tuple(unrecorded)


class _TestsSeen:
    """The last test run among a request's tool results, each result parsed once per session
    (a thread's every request repeats its history)."""

    def __init__(self) -> None:
        self._parsed: dict[str, TestRun | None] = {}

    def last(self, api: str, messages: list[dict[str, Any]]) -> TestRun | None:
        for m in reversed(messages):
            if m.get("role") not in ("tool", "user"):
                continue
            text = result_text(api, m.get("content"))[0]
            if text not in self._parsed:
                self._parsed[text] = (
                    parse_test_run(text) if m.get("role") == "tool" or _OBSERVATION.match(text) else None
                )
            if self._parsed[text] is not None:
                return self._parsed[text]
        return None


def session_signals(turns: Iterable[TurnRecord], *, ended: bool, said: Sequence[Said] = ()) -> list[NextState]:
    """The next state of every turn of one session (``turns`` as :meth:`~lego.learn.store.SqliteStore.iter_turns`
    yields them), in turn order; ``ended``: the session is over (its key revoked); ``said``: what the
    person's side recorded saying in it (:meth:`~lego.learn.store.SqliteStore.said`; see the module docstring)."""
    ordered = sorted(turns, key=lambda t: t.index if t.index is not None else -1)
    by_thread: dict[str, list[TurnRecord]] = {}
    for t in ordered:
        by_thread.setdefault(t.thread, []).append(t)
    pairs = [(t, th[k + 1] if k + 1 < len(th) else None) for th in by_thread.values() for k, t in enumerate(th)]
    # The person's recorded messages are taken in the order the requests carrying them came.
    pairs.sort(key=lambda pair: -1 if pair[1] is None or pair[1].index is None else pair[1].index)
    person = _Person(said)
    seen = _TestsSeen()
    states: dict[int, NextState] = {}
    for turn, after in pairs:
        calls = _calls(turn.reply)
        results: tuple[ToolResult, ...] = ()
        user: str | None = None
        unrecorded: tuple[str, ...] = ()
        if after is None:
            status: NextStateStatus = "ended" if ended else "pending"
        else:
            following = _following(turn, after)
            status = "unmatched" if following is None else "followed"
            if following is not None:
                results, user, unrecorded = _read_following(turn.api, calls, following, person, after.created_at)
        assert turn.index is not None, "session_signals reads turns from the store (each has its index)"
        states[turn.index] = NextState(
            session_id=turn.session_id,
            turn=turn.index,
            thread=turn.thread,
            main=turn.main,
            api=turn.api,
            status=status,
            next_turn=None if after is None else after.index,
            tool_calls=calls,
            tool_results=results,
            user_message=user,
            feedback=turn.feedback,
            tests_before=seen.last(turn.api, turn.messages),
            unrecorded_user_messages=unrecorded,
            asked=_asked(turn.messages, person, turn.created_at),
        )
    _end_state(states, by_thread, ended)
    _episode_replies(states, by_thread)
    return [states[i] for i in sorted(states)]


def _episode_replies(states: dict[int, NextState], by_thread: dict[str, list[TurnRecord]]) -> None:
    """Give each turn without a message of the person in its next state the first one later in its
    thread, and each turn with one the number of turns of the attempt it closed."""
    for thread in by_thread.values():
        steps = 0
        for t in thread:
            if t.index is None:
                continue
            steps += 1
            if states[t.index].user_message is not None:
                states[t.index] = replace(states[t.index], attempt_steps=steps)
                steps = 0
        later: str | None = None
        for t in reversed(thread):
            if t.index is None:
                continue
            state = states[t.index]
            if state.user_message is not None:
                later = state.user_message
            elif later is not None:
                states[t.index] = replace(state, episode_reply=later)


def _end_state(states: dict[int, NextState], by_thread: dict[str, list[TurnRecord]], ended: bool) -> None:
    """Put the session's end state on the main thread's last turn: the test run its last tool results showed."""
    main = next((th for th in by_thread.values() if th[-1].main), None)
    if not ended or main is None:
        return
    last_batch = next(
        (states[t.index] for t in reversed(main) if t.index is not None and states[t.index].tool_results), None
    )
    end_tests = last_batch.tests if last_batch is not None else None
    last = main[-1]
    if end_tests is not None and last.index is not None:
        states[last.index] = replace(states[last.index], session_tests=end_tests)


def _excerpt(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters ...]\n{text[-half:]}"
