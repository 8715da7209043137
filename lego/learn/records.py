"""The records of the learn room: a turn as written (:class:`TurnRecord`, its :class:`TokenRecord`),
feedback on it, a judge's :class:`Verdict` on it, a registered session. Frozen: what a reader of
the store gets cannot be changed under it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Feedback", "Said", "SessionRow", "TokenRecord", "TurnRecord", "Verdict", "VerdictStatus"]


@dataclass(frozen=True)
class TokenRecord:
    """A turn's tokens as the policy saw and sampled them: the engine prompt, the sampled ids and each one's logprob."""

    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    versions: list[int] = field(default_factory=list)
    """The policy version that sampled each output token (empty in a record older than that: read as
    the turn's ``policy_version`` throughout)."""


@dataclass(frozen=True)
class Feedback:
    """A person's verdict on a turn."""

    session_id: str
    turn: int
    score: int
    text: str
    created_at: float


@dataclass(frozen=True)
class Said:
    """A message the person sent to their harness, as their side reported it on the control face
    (``POST /s/{session}/said``) before handing it over: what tells their words from a user-role
    message anything else put in a request (see :mod:`lego.learn.signals`)."""

    session_id: str
    text: str
    created_at: float


VerdictStatus = Literal["scored", "no_signal", "unparseable"]
"""``scored``: the verdict carries a reward; ``no_signal``: the next state said nothing either way
(rules judge); ``unparseable``: the model judge's reply held no score. Only ``scored`` has a score."""


@dataclass(frozen=True)
class Verdict:
    """A judge's verdict on a turn, kept beside it so every reward can be audited (see :mod:`lego.learn.judge`).

    ``score`` in [-1, 1], or None: no reward (never a silent 0). ``inputs``: what the judge was
    given (the turn's next state; the model judge's prompt too), redacted; ``rules``: the rules
    that fired (rules judge); ``raw``: the model judge's reply as it came, redacted."""

    session_id: str
    turn: int
    judge: str
    status: VerdictStatus
    score: float | None
    rules: tuple[str, ...]
    inputs: dict[str, Any]
    raw: str
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "status": self.status,
            "score": self.score,
            "rules": list(self.rules),
            "inputs": self.inputs,
            "raw": self.raw,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class TurnRecord:
    """One completed turn as written (already redacted). ``tokens`` None: the turn's text held a
    secret, so its ids were not kept (the text is, redacted); ``redactions`` counts what was replaced."""

    session_id: str
    thread: str
    main: bool
    api: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply: dict[str, Any]
    reasoning: str
    tokens: TokenRecord | None
    finish_reason: str
    policy_version: int
    constrained: bool
    redactions: int
    temperature: float | None = None
    """The temperature the turn was sampled at (None: a record older than that; unknown)."""
    top_p: float | None = None
    top_k: int | None = None
    """The top-p / top-k truncation it was sampled under (1.0 / 0: none; None: an older record, unknown)."""
    created_at: float = field(default_factory=time.time)
    index: int | None = None
    """The turn's place in its session (0, 1, ...), set by the store."""
    feedback: tuple[Feedback, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    """Every judge's verdict on the turn, oldest first."""

    def to_json(self) -> dict[str, Any]:
        """The turn as one JSON object (`lego serve export`)."""
        tokens = self.tokens
        return {
            "session_id": self.session_id,
            "turn": self.index,
            "created_at": self.created_at,
            "thread": self.thread,
            "main": self.main,
            "api": self.api,
            "messages": self.messages,
            "tools": self.tools,
            "reply": self.reply,
            "reasoning": self.reasoning,
            "prompt_ids": tokens.prompt_ids if tokens else None,
            "output_ids": tokens.output_ids if tokens else None,
            "logprobs": tokens.logprobs if tokens else None,
            "finish_reason": self.finish_reason,
            "policy_version": self.policy_version,
            "constrained": self.constrained,
            "redactions": self.redactions,
            "feedback": [{"score": f.score, "text": f.text, "created_at": f.created_at} for f in self.feedback],
            "verdicts": [v.to_json() for v in self.verdicts],
        }


@dataclass(frozen=True)
class SessionRow:
    """A registered session: ``turns`` written (or, for a private one, served and not written).
    ``ended_at``: when its key was revoked (`lego serve session end`, or the server that opened it
    stopped); None while it may still get turns."""

    id: str
    private: bool
    label: str
    created_at: float
    turns: int
    feedback: int
    ended_at: float | None = None
