"""Judges: a turn's next state becomes a reward, and what the judge saw is kept beside the verdict.

    judge = RuleJudge()                                   # or ModelJudge(url, model) (any OpenAI-compatible server)
    report = judge_store(store, judge)                    # every settled turn not yet judged by `judge`
    store.verdicts(session_id="s-1", judge="rules")       # the verdicts, with their inputs and raw replies

A judge reads one :class:`~lego.learn.signals.NextState` (what followed the turn: its tool
results, the person's next message, their feedback, the tests before and after) and returns a
:class:`~lego.learn.records.Verdict`: a score in [-1, 1], or **no score** (``no_signal``: the next
state said nothing either way; ``unparseable``: the model judge answered without a score) -- never
a silent 0, so a learner can tell "neutral" from "unknown". Turns whose next state is not settled
(``pending``: the thread's last turn of a session still open) are not judged yet.

**The rules** (:class:`RuleJudge`, name ``rules``), each a named term; the score is the sum of the
terms that fired, clipped to [-1, 1], and ``rules`` lists them:

==========================  =====  ==============================================================
rule                        score  fires when
==========================  =====  ==============================================================
``feedback``                mean   the person scored the turn (+1/-1): *only* this term counts
``tests_fixed``              +1    the thread's last test run before the turn was red, its results' last run is green
``tests_broke``              -1    the run before was green, now red
``tests_fewer_failures``    +0.5   red before and after, fewer failed + errored
``tests_more_failures``     -0.5   red before and after, more failed + errored
``tests_green``             +0.5   a green run with no red one before it (nothing was fixed, nothing broke)
``tests_still_red``         -0.5   red before and after, as many failed + errored
``command_failed``          -0.5   a result failed (non-zero exit, or a traceback) and showed no test run
``user_thanks``             +0.5   the person's next message thanks or confirms ("thanks", "works", "perfect")
``user_requery``            -0.5   the person's next message says it is still wrong ("still fails", "doesn't work", "try again")
``forged_user_message``      -1    a user message followed the turn that thanks or confirms but holds nothing the
                                   person said (only in a session that records what the person says)
``session_tests_green``      +1    the main thread's last turn of an ended session; its last test run green
``session_tests_red``        -1    ... red
``attempt_thanks``          +0.5   no other rule fires and no message of the person follows the turn itself, and their reply
                                   to the attempt it was a step of (``episode_reply``: the next one in its thread) thanks
``attempt_requery``         -0.5   ... that reply says it is still wrong
==========================  =====  ==============================================================

**Whose words** (:mod:`lego.learn.signals`). Where the person's side records what it sends (the
control face's ``said``), the ``user_*`` and ``attempt_*`` rules read only those messages -- the
recorded text, not the user message holding it -- and a user message holding none is not the
person's. Such a message that reads as thanks is what the agent would forge (it runs as the
harness's uid and can write the harness's conversation or its prompt): ``forged_user_message``
scores it below what the thanks would have earned, so forging never pays. A harness's own
user-role notes (lego-agent's "no valid tool call", mini's format errors) are not the person's
either, but do not read as thanks and score nothing.

A first red run (none before it in the thread) fires nothing of its own: running the tests to see
the failure is how a fix starts (the attempt's reply, if any, scores it). A re-query is read before thanks ("thanks, but it still fails" is a re-query). The phrases are
English; a person who writes otherwise gives the model judge or explicit feedback.

**The model judge** (:class:`ModelJudge`, name ``model:<model>``) sends the rubric below, the
request's last user message, the turn's reply and its next state (as JSON, each result cut to
``excerpt`` characters) to an OpenAI-compatible ``/chat/completions``; the reply ends in
``Score: 1`` (the turn helped), ``Score: 0`` (unclear) or ``Score: -1`` (it did not). ``votes`` > 1
samples that many replies (at ``temperature``) and averages the scores found; none found is
``unparseable``. The verdict keeps the prompt and every reply. By default (`lego serve judge
--judge model`) the URL is the policy itself, served in-process for the run; a URL off this
machine is refused unless ``serve.judge_allow_remote`` (your sessions would leave it).

Everything a verdict keeps is redacted again before it is written (:func:`judge_store`): the
store's turns already are, but a model's reply is new text.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import httpx
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from lego.config import ServeConfig
from lego.errors import LegoError
from lego.learn.records import TurnRecord, Verdict
from lego.learn.redact import Redactor
from lego.learn.signals import NextState, session_signals
from lego.learn.store import TurnStore

__all__ = [
    "RUBRIC",
    "RULES",
    "Judge",
    "JudgeError",
    "JudgeReport",
    "ModelJudge",
    "RuleJudge",
    "hindsight_hint",
    "judge_store",
    "parse_score",
]

RULES: dict[str, float] = {
    "tests_fixed": 1.0,
    "tests_broke": -1.0,
    "tests_fewer_failures": 0.5,
    "tests_more_failures": -0.5,
    "tests_green": 0.5,
    "tests_still_red": -0.5,
    "command_failed": -0.5,
    "user_thanks": 0.5,
    "user_requery": -0.5,
    "forged_user_message": -1.0,
    "session_tests_green": 1.0,
    "session_tests_red": -1.0,
    "attempt_thanks": 0.5,
    "attempt_requery": -0.5,
}
"""Each rule's term (``feedback`` is the person's mean score and overrides the others)."""

_REQUERY = re.compile(
    r"\b(still\s+(fail\w*|broken|wrong|red|not|errors?|doesn'?t|does\s+not|isn'?t)|(does\s*n[o']?t|did\s*n[o']?t|"
    r"not|isn'?t)\s+(work\w*|pass\w*|fix\w*|right)|try\s+again|wrong|that'?s\s+not|no\s+luck|same\s+(error|failure)|"
    r"(test|tests)\s+(still\s+)?(fail\w*|error\w*))\b",
    re.IGNORECASE,
)
_THANKS = re.compile(
    r"\b(thanks?|thank\s+you|thx|works(\s+now)?|it\s+passes|(tests?|all)\s+pass\w*|perfect|great|lgtm|"
    r"looks\s+good|well\s+done|that\s+did\s+it|solved|fixed\s+it)\b",
    re.IGNORECASE,
)


class JudgeError(LegoError):
    """The judge could not give a verdict (its server unreachable or answering in error): nothing was written."""


class Judge(Protocol):
    """Scores one turn from its next state."""

    name: str

    def judge(self, turn: TurnRecord, state: NextState) -> Verdict: ...


# --------------------------------------------------------------------------------------- rules
def _test_terms(state: NextState) -> list[str]:
    after, before = state.tests, state.tests_before
    if after is None:
        return []
    if before is not None and before.red and after.green:
        return ["tests_fixed"]
    if before is not None and before.green and after.red:
        return ["tests_broke"]
    if before is not None and before.red and after.red:
        gone = (before.failed + before.errors) - (after.failed + after.errors)
        if gone > 0:
            return ["tests_fewer_failures"]
        return ["tests_more_failures"] if gone < 0 else ["tests_still_red"]
    # A first red run is no term: the agent may have just found the failure it was asked to fix.
    return ["tests_green"] if after.green else []


def _user_terms(text: str | None) -> list[str]:
    if not text:
        return []
    if _REQUERY.search(text):
        return ["user_requery"]
    return ["user_thanks"] if _THANKS.search(text) else []


def rule_terms(state: NextState) -> list[str]:
    """The rules that fire on ``state`` (``feedback`` aside), in the table's order."""
    terms = _test_terms(state)
    if any(r.failed and r.test_run is None for r in state.tool_results):
        terms.append("command_failed")
    terms += _user_terms(state.user_message)
    if any(_user_terms(m) == ["user_thanks"] for m in state.unrecorded_user_messages):
        terms.append("forged_user_message")
    if state.session_tests is not None:
        terms.append("session_tests_green" if state.session_tests.green else "session_tests_red")
    if not terms and state.user_message is None:  # the step's own next state is silent: the attempt's reply speaks
        terms += [t.replace("user_", "attempt_") for t in _user_terms(state.episode_reply)]
    return terms


def hindsight_hint(state: NextState, limit: int = 600) -> str | None:
    """What the next state says the turn should have done differently, as text for a teacher
    context (hindsight on-policy distillation), or None when it says nothing directive: the
    person's correction or re-query, their negative feedback's words, the tests that failed after
    the turn (summary and ids), the exception a command raised, a command's non-zero exit.

    The person's re-query answers the attempt. In an attempt of several steps it is the hint of the
    steps that did the work (their ``episode_reply``), not of the step that closed it (``submit``,
    "done"): there the hinted teacher disfavours handing the work over at all, so distilling it
    teaches the agent never to finish -- measured: after 22 distillation steps 45 of ~56 held-out
    samples per temperature ended at the turn limit (start: 2-18 of 60). A single-step attempt's
    turn is the work itself (a reply the person answers directly) and keeps it."""
    parts: list[str] = []
    if state.user_message and state.attempt_steps <= 1 and _REQUERY.search(state.user_message):
        parts.append(f"The user replied: {state.user_message.strip()[:limit]}")
    elif state.user_message is None and state.episode_reply and _REQUERY.search(state.episode_reply):
        parts.append(f"When the agent finished this attempt, the user replied: {state.episode_reply.strip()[:limit]}")
    parts += [f"The user said of this step: {f.text.strip()[:limit]}" for f in state.feedback if f.score < 0 and f.text]
    tests = state.tests
    if tests is not None and tests.red:
        failing = [name for name, status in tests.tests.items() if status in ("failed", "error")]
        named = f" ({', '.join(failing[:8])})" if failing else ""
        parts.append(f"After this step the tests failed: {tests.summary.strip()}{named}")
    for r in state.tool_results:
        if r.test_run is not None or not r.failed:
            continue
        if r.traceback is not None:
            parts.append(f"The command raised {r.traceback.exc_type}: {r.traceback.message.strip()[:limit]}")
        else:
            tail = r.text.strip().splitlines()[-1:] if r.text.strip() else []
            parts.append(f"The command exited with code {r.exit_code}" + (f": {tail[0][:limit]}" if tail else ""))
    return "\n".join(parts) if parts else None


class RuleJudge:
    """The rubric in the module docstring, as code: deterministic, no model."""

    name = "rules"

    def judge(self, turn: TurnRecord, state: NextState) -> Verdict:
        inputs = {"next_state": state.to_json()}
        if state.feedback:
            score = sum(f.score for f in state.feedback) / len(state.feedback)
            return _verdict(state, self.name, "scored", score, ("feedback",), inputs, "")
        terms = rule_terms(state)
        if not terms:
            return _verdict(state, self.name, "no_signal", None, (), inputs, "")
        score = max(-1.0, min(1.0, sum(RULES[t] for t in terms)))
        return _verdict(state, self.name, "scored", score, tuple(terms), inputs, "")


def _verdict(
    state: NextState,
    judge: str,
    status: Any,
    score: float | None,
    rules: tuple[str, ...],
    inputs: dict[str, Any],
    raw: str,
) -> Verdict:
    return Verdict(state.session_id, state.turn, judge, status, score, rules, inputs, raw)


# --------------------------------------------------------------------------------------- model
RUBRIC = """You judge one step of a coding agent working for a person. You see what the person last asked, \
the agent's reply (its text and the tools it called) and the NEXT STATE: what happened right after -- the \
tools' results (exit codes, test runs, tracebacks), the person's next message, and at the end of a \
session its final test run. When the person spoke only after later steps of the same attempt, their \
reply to the attempt is given as episode_reply: the step shares that attempt's outcome.

Judge the reply by its next state only:
- Score 1: the step moved the work forward -- failing tests now pass, the command it ran did what was \
intended, the person confirmed or thanked.
- Score -1: the step hurt or wasted the turn -- tests went from passing to failing, its command failed \
for a reason the agent caused, the person corrected it, asked again or said it is still wrong.
- Score 0: the next state does not tell.

Think briefly, then end your answer with one line: Score: 1, Score: 0 or Score: -1."""

_SCORE = re.compile(r"(?:score\s*[:=]\s*|\\boxed\{\s*)([+-]?\s*[01])(?:\.0+)?\s*\}?", re.IGNORECASE)


def parse_score(text: str) -> int | None:
    """The last ``Score: X`` (or ``\\boxed{X}``) in ``text``, X in {-1, 0, 1}; None when there is none."""
    found = _SCORE.findall(text)
    return int(found[-1].replace(" ", "")) if found else None


def _reply_text(turn: TurnRecord) -> str:
    reply = turn.reply
    content = reply.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    lines = [str(content or "").strip()]
    for call in reply.get("tool_calls") or []:
        fn = call.get("function", {})
        lines.append(f"[tool call] {fn.get('name', '?')}({fn.get('arguments', '')})")
    return "\n".join(line for line in lines if line) or "(empty reply)"


def judge_messages(turn: TurnRecord, state: NextState, excerpt: int = 2000) -> list[dict[str, str]]:
    """The model judge's prompt for one turn (kept in the verdict's inputs)."""
    body = (
        f"THE PERSON LAST ASKED:\n{state.asked or '(none)'}\n\n"
        f"THE AGENT'S REPLY:\n{_reply_text(turn)}\n\n"
        f"NEXT STATE (JSON):\n{json.dumps(state.to_json(excerpt), indent=1, ensure_ascii=False)}"
    )
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": body}]


@dataclass
class ModelJudge:
    """A judge model behind an OpenAI-compatible ``/chat/completions`` (``url`` is its base, ending in /v1)."""

    url: str
    model: str
    api_key: str = ""
    votes: int = 1
    temperature: float = 0.0
    max_tokens: int = 512
    excerpt: int = 2000
    timeout_s: float = 300.0
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=None))

    @classmethod
    def from_config(cls, serve: ServeConfig, url: str) -> ModelJudge:
        """The judge ``[serve]`` describes, at ``url`` (its key from ``LEGO_JUDGE_API_KEY``, never a file)."""
        return cls(
            url,
            serve.judge_model,
            api_key=os.environ.get("LEGO_JUDGE_API_KEY", ""),
            votes=serve.judge_votes,
            temperature=serve.judge_temperature,
            max_tokens=serve.judge_max_tokens,
        )

    def __post_init__(self) -> None:
        if self.votes < 1:
            raise ValueError(f"votes must be >= 1, got {self.votes}")
        self.name = f"model:{self.model}"

    def judge(self, turn: TurnRecord, state: NextState) -> Verdict:
        messages = judge_messages(turn, state, self.excerpt)
        replies = [self._ask(messages, vote) for vote in range(self.votes)]
        scores = [s for s in (parse_score(r) for r in replies) if s is not None]
        inputs = {"next_state": state.to_json(self.excerpt), "messages": messages, "votes": self.votes}
        raw = "\n\n---- vote ----\n\n".join(replies)
        if not scores:
            return _verdict(state, self.name, "unparseable", None, (), inputs, raw)
        inputs["scores"] = scores
        return _verdict(state, self.name, "scored", sum(scores) / len(scores), (), inputs, raw)

    def _ask(self, messages: list[dict[str, str]], vote: int) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": vote,  # votes differ from each other, a rerun repeats them (where the server honours seeds)
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            r = self._post(f"{self.url.rstrip('/')}/chat/completions", body, headers)
        except httpx.HTTPError as exc:
            raise JudgeError(f"the judge at {self.url} did not answer: {exc}") from exc
        if r.status_code != 200:
            raise JudgeError(f"the judge at {self.url} answered {r.status_code}: {r.text[:500]}")
        try:
            content = r.json()["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeError(f"the judge at {self.url} answered without a chat completion: {r.text[:500]}") from exc
        return str(content or "")

    @retry(
        retry=retry_if_exception_type(httpx.TransportError),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.5, max=4),
        reraise=True,
    )
    def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        return self.client.post(url, json=body, headers=headers, timeout=self.timeout_s)


# --------------------------------------------------------------------------------------- the store
@dataclass
class JudgeReport:
    """What :func:`judge_store` did: verdicts written by status, turns left for later or judged before."""

    judge: str
    scored: int = 0
    no_signal: int = 0
    unparseable: int = 0
    pending: int = 0
    already: int = 0
    sessions: int = 0

    @property
    def written(self) -> int:
        return self.scored + self.no_signal + self.unparseable

    def line(self) -> str:
        return (
            f"judge {self.judge}: {self.written} verdicts on {self.sessions} sessions ({self.scored} scored, "
            f"{self.no_signal} no signal, {self.unparseable} unparseable); {self.already} judged before, "
            f"{self.pending} pending (their session is still open)"
        )


def judge_store(
    store: TurnStore,
    judge: Judge,
    *,
    session_ids: Sequence[str] | None = None,
    redactor: Redactor | None = None,
    again: bool = False,
    on_verdict: Callable[[Verdict], None] | None = None,
) -> JudgeReport:
    """Judge every settled turn of the store's recorded sessions (or of ``session_ids``) that
    ``judge`` has not judged on its present next state (never judged, or judged before feedback
    came or before its session ended: :func:`state_fingerprint`; ``again``: judge the others too),
    and write each verdict, redacted, as it is made -- earlier verdicts stay, the newest counts. An
    interrupted run keeps what it wrote and a rerun continues. Private sessions have no turns to judge."""
    redactor = redactor or Redactor()
    report = JudgeReport(judge.name)
    rows = [r for r in store.sessions() if not r.private and (session_ids is None or r.id in session_ids)]
    if session_ids is not None:
        missing = sorted(set(session_ids) - {r.id for r in rows})
        if missing:
            raise KeyError(f"no recorded session {', '.join(map(repr, missing))} in the store")
    for row in rows:
        turns = list(store.iter_turns(session_id=row.id))
        if not turns:
            continue
        report.sessions += 1
        by_index = {t.index: t for t in turns}
        seen = {v.turn: v.inputs.get("fingerprint") for v in store.verdicts(session_id=row.id, judge=judge.name)}
        for state in session_signals(turns, ended=row.ended_at is not None, said=store.said(row.id)):
            if not state.known:
                report.pending += 1
                continue
            mark = state_fingerprint(state)
            if seen.get(state.turn, "") == mark and not again:
                report.already += 1
                continue
            verdict = judge.judge(by_index[state.turn], state)
            verdict = _redacted(replace(verdict, inputs={**verdict.inputs, "fingerprint": mark}), redactor)
            store.add_verdict(verdict)
            setattr(report, verdict.status, getattr(report, verdict.status) + 1)
            if on_verdict is not None:
                on_verdict(verdict)
    return report


def state_fingerprint(state: NextState) -> str:
    """What a verdict was made from, as a hash: a turn is judged again when it changes (feedback
    given after its verdict, a session that ended since)."""
    return hashlib.sha256(json.dumps(state.to_json(), sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def _redacted(verdict: Verdict, redactor: Redactor) -> Verdict:
    inputs, _ = redactor.redact_json(verdict.inputs)
    raw, _ = redactor.redact(verdict.raw)
    return Verdict(
        verdict.session_id,
        verdict.turn,
        verdict.judge,
        verdict.status,
        verdict.score,
        verdict.rules,
        inputs,
        raw,
        verdict.created_at,
    )
