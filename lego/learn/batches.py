"""Which recorded turns a learner may train on, and with what score (the learn room's half of the learner).

    picked = pick_turns(store, judge="rules", temperature=1.0, version=3, max_staleness=4)
    picked.ready          # LearnableTurn: the tokens exactly as sampled, the version of each, the score
    picked.skipped        # (session_id, turn, outcome): turns that can never be trained, and why

A turn is **learnable** when the judge ``judge`` scored it (its newest verdict of that judge has a
score) and the learner has not dealt with it yet (the store's ``learned`` marks). It carries that
score, in [-1, 1] (OpenClaw-RL's binary reward is the ±1 case); the learner makes it an advantage by
subtracting its baseline (:mod:`lego.learn.baseline`), so a turn better than usual is reinforced and
a worse one pushed down.

A learnable turn is **skipped for good**, with the reason kept in the store, when training on it
would not be what it claims:

- ``no_tokens``: its text held a secret, so its ids were never written;
- ``constrained``: decoded under a forced tool call's grammar, not drawn from the policy;
- ``temperature``: sampled at another temperature than the trainer computes logprobs at, or at one
  not recorded (an older record): its logprobs are another distribution's, and the fidelity gate
  and the importance ratios would compare unlike with unlike;
- ``truncated``: sampled under top-p < 1 or top-k > 0 (what the harness asked), or with the
  truncation not recorded (an older record): the draw came from a truncated distribution the
  trainer does not compute, so its ratios and the fidelity gate would compare unlike with unlike;
- ``stale``: sampled more than ``max_staleness`` learner steps before the current weights;
- ``rolled_back``: sampled by weights that were rolled back (a version above the current one);
- ``no_hint``: with distillation alone (``serve.learn_signal = "opd"``), a turn whose next state
  holds nothing directive (:func:`lego.learn.judge.hindsight_hint`).

Turns are taken oldest first, so a backlog drains in the order it was served.

**Which ready turns make a step** (``serve.learn_pick``): ``freshest`` takes the freshest
``serve.learn_batch``; ``balanced`` (:func:`balanced_batch`, the default) spreads the step over the scores
the ready turns hold, the scarcest score first. A person thanks few sessions, and every turn of the
attempt they thanked scores alike, so the rare scores come in clumps; taken one a step they went stale
before they trained (measured: 36 of 70 thanked turns in a 30-minute `lego bench use`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lego.learn.judge import hindsight_hint
from lego.learn.signals import NextState, session_signals
from lego.learn.store import TurnStore

__all__ = ["LearnableTurn", "Picked", "balanced_batch", "pick_turns", "situation"]


@dataclass(frozen=True)
class LearnableTurn:
    """One recorded turn as a learner trains on it: the engine prompt, the sampled ids with their
    logprobs and the policy version of each, and the judge's score (before the learner's baseline)."""

    session_id: str
    turn: int
    thread: str
    main: bool
    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    score: float
    judge: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    hint: str | None = None
    """What the next state says should have differed (:func:`lego.learn.judge.hindsight_hint`), with ``hints``."""
    situation: int = 1
    """How many user messages the turn's request held (the person's ask, then each re-query or nudge):
    ``serve.learn_baseline=situation`` compares a turn only with turns served in the same situation."""


@dataclass
class Picked:
    ready: list[LearnableTurn] = field(default_factory=list)
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    recent: dict[int, tuple[float, int]] = field(default_factory=dict)
    """Per situation (:attr:`LearnableTurn.situation`), the sum and count of the scores of every trainable
    turn the recent weights served (within ``max_staleness`` steps), trained already or not -- every
    ready turn among them: what the policy now scores there."""


def situation(messages: list[dict[str, Any]]) -> int:
    """The number of user messages of a request (:attr:`LearnableTurn.situation`)."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user")


def pick_turns(
    store: TurnStore,
    *,
    judge: str,
    temperature: float,
    version: int,
    max_staleness: int,
    hints: bool = False,
    need_hint: bool = False,
) -> Picked:
    """Every learnable turn of the store (see the module docstring), and the ones to skip for good.
    ``hints``: each ready turn carries its conversation and its hindsight hint (for distillation);
    ``need_hint``: a turn without one is skipped for good too (``no_hint``: distillation alone has
    nothing to teach from it)."""
    done = store.learned()
    turns = list(store.iter_turns())  # one read of the store serves the hints and the pick
    states: dict[tuple[str, int], NextState] = {}
    if hints:
        ended = {r.id: r.ended_at is not None for r in store.sessions()}
        by_session: dict[str, list[Any]] = {}
        for turn in turns:
            by_session.setdefault(turn.session_id, []).append(turn)
        for sid, of_session in by_session.items():
            of_states = session_signals(of_session, ended=ended.get(sid, False), said=store.said(sid))
            states.update({(sid, st.turn): st for st in of_states})
    newest: dict[tuple[str, int], float | None] = {}
    for v in store.verdicts(judge=judge):
        newest[(v.session_id, v.turn)] = v.score  # written oldest first: the last one wins
    out = Picked()
    sums: dict[int, list[float]] = {}
    for t in turns:
        assert t.index is not None
        key = (t.session_id, t.index)
        score = newest.get(key)
        if score is None:
            continue
        why, versions = _unfit(t, temperature, version, max_staleness)
        if why is None:  # what the recent weights scored in its situation, trained already or not
            sums.setdefault(situation(t.messages), []).append(float(score))
        if key in done:
            continue
        if why is not None:
            out.skipped.append((*key, why))
            continue
        tokens = t.tokens
        assert tokens is not None
        hint = hindsight_hint(states[key]) if key in states else None
        if need_hint and hint is None:
            out.skipped.append((*key, "no_hint"))
            continue
        out.ready.append(
            LearnableTurn(
                session_id=t.session_id,
                turn=t.index,
                thread=t.thread,
                main=t.main,
                prompt_ids=list(tokens.prompt_ids),
                output_ids=list(tokens.output_ids),
                logprobs=list(tokens.logprobs),
                versions=versions,
                score=float(score),
                judge=judge,
                messages=t.messages if hints else [],
                tools=t.tools if hints else [],
                hint=hint,
                situation=situation(t.messages),
            )
        )
    out.recent = {k: (math.fsum(v), len(v)) for k, v in sums.items()}
    return out


def _unfit(t: Any, temperature: float, version: int, max_staleness: int) -> tuple[str | None, list[int]]:
    """Why turn ``t`` can never train (the module docstring's reasons, ``no_hint`` aside), or None; and
    the policy version of each of its sampled tokens."""
    tokens = t.tokens
    if tokens is None or not tokens.output_ids:
        return "no_tokens", []
    versions = list(tokens.versions) or [t.policy_version] * len(tokens.output_ids)
    if t.constrained:
        return "constrained", versions
    if t.temperature is None or not math.isclose(t.temperature, temperature, rel_tol=0, abs_tol=1e-6):
        return "temperature", versions
    if t.top_p is None or t.top_p < 1.0 or t.top_k is None or t.top_k > 0:
        return "truncated", versions
    if max(versions) > version:
        return "rolled_back", versions
    if version - min(versions) > max_staleness:
        return "stale", versions
    return None, versions


def balanced_batch(fresh: Sequence[LearnableTurn], size: int) -> list[LearnableTurn]:
    """``size`` turns of ``fresh`` (freshest first) spread over its scores: the freshest unpicked turn of
    each score in turn, the score with the fewest ready turns first, so a scarce score fills up to its
    share of the batch at once. ``fresh[0]`` is always in it: the fidelity gate measures the turns the
    served weights sampled, and the freshest holds them when any does. One score: ``fresh[:size]``."""
    if len(fresh) <= size:
        return list(fresh)
    groups: dict[float, list[LearnableTurn]] = {}
    for t in fresh:
        groups.setdefault(t.score, []).append(t)
    queues = [groups[s] for s in sorted(groups, key=lambda s: (len(groups[s]), s))]
    batch: list[LearnableTurn] = []
    for depth in range(len(fresh)):
        for queue in queues:
            if depth < len(queue) and len(batch) < size:
                batch.append(queue[depth])
        if len(batch) == size:
            break
    if not any(t is fresh[0] for t in batch):  # more scores than slots: the freshest takes the last one's place
        batch[-1] = fresh[0]
    place = {id(t): i for i, t in enumerate(fresh)}
    return sorted(batch, key=lambda t: place[id(t)])
