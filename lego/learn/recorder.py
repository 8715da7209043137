"""``LearnRecorder``: the proxy's turn sink for `lego serve` -- privacy, redaction, then the store.

For each completed turn (:class:`lego.proxies.turns.CompletedTurn`, handed over before the reply
is returned):

1. a session the store does not know is not recorded (opting in is registering); a private one is
   counted and nothing else;
2. every text is redacted (:class:`~lego.learn.redact.Redactor`, with the harness's own API key as
   a literal): the request's messages and tools, the reply, its reasoning;
3. **token ids**: the prompt and output ids are decoded and the redactor run over that text. If it
   finds anything, the turn is written *without* token ids (``TurnRecord.tokens`` None) -- ids
   cannot be redacted: a token span "masked" in place would still hold the secret's ids, and
   replacing it with a placeholder's ids would be a prompt the policy never saw, with logprobs
   that do not belong to it. Such a turn keeps its redacted text (for judges, feedback and
   export) and is not a token-level training item (``iter_turns(with_tokens=True)`` skips it).
   Since a thread's prompt holds its whole history, a secret an agent read (``cat .env``) costs
   the token ids of every later turn of that thread: keep secrets out of the agent's context;
4. the store writes it in one transaction; the sink returns once it is committed, so the reply
   goes out after the turn is durable. Writes run on one worker thread, never on the server's
   event loop (other sessions keep streaming while a turn is fsynced).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from lego.learn.records import TokenRecord, TurnRecord
from lego.learn.redact import Redactor
from lego.learn.store import TurnStore
from lego.proxies.turns import CompletedTurn, FeedbackBody, SaidBody

__all__ = ["LearnRecorder", "redact_turn"]


def redact_turn(turn: CompletedTurn, redactor: Redactor, decode: Callable[[list[int]], str]) -> TurnRecord:
    """The record written for ``turn``: its text redacted, its ids kept only if they hold no secret."""
    messages, n_messages = redactor.redact_json(turn.messages)
    tools, n_tools = redactor.redact_json(turn.tools)
    reply, n_reply = redactor.redact_json(turn.reply)
    reasoning, n_reasoning = redactor.redact(turn.reasoning)
    in_ids = redactor.count(decode(turn.prompt_ids)) + redactor.count(decode(turn.output_ids))
    tokens = (
        TokenRecord(
            prompt_ids=list(turn.prompt_ids),
            output_ids=list(turn.output_ids),
            logprobs=list(turn.logprobs),
            versions=list(turn.versions),
        )
        if in_ids == 0
        else None
    )
    return TurnRecord(
        session_id=turn.session_id,
        thread=turn.thread,
        main=turn.main,
        api=turn.api,
        messages=messages,
        tools=tools,
        reply=reply,
        reasoning=reasoning,
        tokens=tokens,
        finish_reason=turn.finish_reason,
        policy_version=turn.policy_version,
        constrained=turn.constrained,
        temperature=turn.temperature,
        top_p=turn.top_p,
        top_k=turn.top_k,
        redactions=n_messages + n_tools + n_reply + n_reasoning + in_ids,
    )


class LearnRecorder:
    """A :class:`~lego.proxies.turns.TurnSink` over a :class:`~lego.learn.store.TurnStore` (see the module docstring).

    ``decode``: the chat format's ids → text (special tokens kept); ``redactor``: the configured
    one (built-in patterns and ``serve.redact_literals``)."""

    def __init__(self, store: TurnStore, decode: Callable[[list[int]], str], redactor: Redactor | None = None) -> None:
        self.store = store
        self.decode = decode
        self.redactor = redactor or Redactor()
        self.version_base = 0
        """Added to the engine's policy versions before a turn is written. The engine counts weight
        loads from 0 in each process; the learner sets this so that the store's versions count its
        steps across restarts (a turn's version is then the learner step whose weights sampled it)."""
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lego-learn-store")

    def keep(self, turn: CompletedTurn, session_key: str) -> int | None:
        """Write ``turn`` (blocking); returns its index, or None when it is not written (unregistered or private)."""
        row = self.store.session(turn.session_id)
        if row is None:
            return None
        if row.private:
            self.store.count_private_turn(turn.session_id)
            return None
        if self.version_base:
            base = self.version_base
            turn = replace(turn, policy_version=turn.policy_version + base, versions=[v + base for v in turn.versions])
        return self.store.add_turn(redact_turn(turn, self.redactor.with_literals([session_key]), self.decode))

    async def turn_completed(self, turn: CompletedTurn, session_key: str) -> None:
        await asyncio.get_running_loop().run_in_executor(self._writer, self.keep, turn, session_key)

    def add_feedback(self, session_id: str, body: FeedbackBody) -> dict[str, Any]:
        text, _ = self.redactor.redact(body.text)
        fb = self.store.add_feedback(session_id, body.turn, body.score, text)
        return {"session_id": fb.session_id, "turn": fb.turn, "score": fb.score, "text": fb.text}

    async def feedback(self, session_id: str, body: FeedbackBody) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(self._writer, self.add_feedback, session_id, body)

    def add_said(self, session_id: str, body: SaidBody) -> dict[str, Any]:
        """Keep (redacted) what the person's side says it sends; a private session keeps nothing."""
        text, _ = self.redactor.redact(body.text)
        said = self.store.add_said(session_id, text)
        return {"session_id": session_id, "kept": said is not None}

    async def said(self, session_id: str, body: SaidBody) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(self._writer, self.add_said, session_id, body)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
