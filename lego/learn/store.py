"""Where a person's sessions are kept: the :class:`TurnStore` seam and its SQLite implementation.

    store = SqliteStore("~/.local/share/lego/serve/learn.db")
    store.register_session("s-1", private=False, label="fix the parser")   # opt in
    index = store.add_turn(record)              # one transaction; returns after the commit is durable
    store.add_feedback("s-1", None, +1, "that fixed it")                    # on the last turn
    store.add_verdict(verdict)                  # a judge's verdict beside its turn (lego.learn.judge)
    store.end_session("s-1")                    # its key was revoked: no turn follows its last one
    for turn in store.iter_turns(with_tokens=True): ...                     # never a private session's

**What is written.** A turn is written only for a *registered* session (opting in is registering;
`lego serve session new` does it) and only as a :class:`TurnRecord` the caller has already
redacted (:mod:`lego.learn.recorder` does it for `lego serve`). A private session is a row with a
turn count and nothing else: :meth:`add_turn` refuses one, so no caller can write its content, and
:meth:`iter_turns` joins on the sessions table and skips private sessions besides. Its label is
not kept either.

**Durability.** WAL journal, ``synchronous=FULL``: :meth:`add_turn` returns after its transaction
is committed and the WAL fsynced, so a turn whose reply the client received survives a SIGKILL of
the server (and a power cut). One transaction per turn (``BEGIN IMMEDIATE``: the turn index is
taken inside it). Readers in other processes (`lego serve export`, `lego feedback`) see committed
turns only.

**Deletion.** ``secure_delete`` is on, so deleted rows are overwritten in the file, and
:meth:`purge` / :meth:`delete_before` checkpoint the WAL (truncating it), so purged text is gone
from every file of the database, not just unreachable.

**Encoding.** Messages, tools and the reply as JSON text; token ids as little-endian int32 and
logprobs as little-endian float64 blobs (a 20k-token prompt is 80 kB). A turn whose text held a
secret has no token ids at all (``tokens`` is None; see :mod:`lego.learn.recorder`).

**The person's words.** ``said`` keeps, per session, each message the person's side reported on the
control face before sending it (redacted like a turn, none for a private session, deleted with
the session and by retention): what tells their messages from user-role text that anything else
(the agent, through its sandbox) put in a request. :mod:`lego.learn.signals` reads it.

**Verdicts.** A judge's :class:`~lego.learn.records.Verdict` is a row beside its turn (``verdicts``:
judge, status, score or NULL, the rules that fired, the inputs as JSON, the model's raw reply),
written already redacted like a turn, deleted with it (purge, retention).

**Versions.** ``PRAGMA user_version`` says which schema a file holds; opening an older one
migrates it in place, in one transaction (:data:`_MIGRATIONS`), so a database written by an
earlier lego stays readable with everything in it. Version 2 added the verdicts table and the
sessions' ``ended_at``; version 3 each turn's per-token versions and sampling temperature, and the
``learned`` table (which turns the learner used, at which step: :mod:`lego.conductor.serve_learner`);
version 4 the top-p / top-k each turn was sampled under; version 5 the ``said`` table (what the
person's side reported saying, :meth:`SqliteStore.add_said`). A newer file than this lego knows is
refused, never rewritten.

``SqliteStore(":memory:")`` is the test double: the same code, no file.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from lego.errors import LegoError
from lego.learn.records import Feedback, Said, SessionRow, TokenRecord, TurnRecord, Verdict

__all__ = ["NotRecordedError", "SqliteStore", "TurnStore"]


class NotRecordedError(LegoError):
    """A write for a session that is not registered, or is private (its content is never written)."""


class TurnStore(Protocol):
    """Sessions, their redacted turns and feedback (see the module docstring)."""

    def register_session(self, session_id: str, *, private: bool, label: str = "") -> SessionRow: ...

    def session(self, session_id: str) -> SessionRow | None: ...

    def sessions(self) -> list[SessionRow]: ...

    def add_turn(self, record: TurnRecord) -> int: ...

    def count_private_turn(self, session_id: str) -> None: ...

    def add_feedback(self, session_id: str, turn: int | None, score: int, text: str) -> Feedback: ...

    def add_said(self, session_id: str, text: str) -> Said | None: ...

    def said(self, session_id: str) -> list[Said]: ...

    def end_session(self, session_id: str) -> bool: ...

    def end_open_sessions(self) -> int: ...

    def add_verdict(self, verdict: Verdict) -> None: ...

    def mark_learned(self, rows: list[tuple[str, int, int, str, float | None]]) -> None: ...

    def learned(self) -> dict[tuple[str, int], tuple[int, str]]: ...

    def unlearn_after(self, step: int) -> int: ...

    def verdicts(self, *, session_id: str | None = None, judge: str | None = None) -> list[Verdict]: ...

    def iter_turns(self, *, session_id: str | None = None, with_tokens: bool = False) -> Iterator[TurnRecord]: ...

    def purge(self, session_id: str | None = None) -> int: ...

    def delete_before(self, cutoff: float) -> int: ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    private INTEGER NOT NULL,
    label TEXT NOT NULL,
    created_at REAL NOT NULL,
    private_turns INTEGER NOT NULL DEFAULT 0,
    ended_at REAL
);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    created_at REAL NOT NULL,
    thread TEXT NOT NULL,
    main INTEGER NOT NULL,
    api TEXT NOT NULL,
    messages TEXT NOT NULL,
    tools TEXT NOT NULL,
    reply TEXT NOT NULL,
    reasoning TEXT NOT NULL,
    prompt_ids BLOB,
    output_ids BLOB,
    logprobs BLOB,
    finish_reason TEXT NOT NULL,
    policy_version INTEGER NOT NULL,
    constrained INTEGER NOT NULL,
    redactions INTEGER NOT NULL,
    versions BLOB,
    temperature REAL,
    top_p REAL,
    top_k INTEGER,
    PRIMARY KEY (session_id, idx)
);
CREATE INDEX IF NOT EXISTS turns_created ON turns(created_at);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    score INTEGER NOT NULL,
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    FOREIGN KEY (session_id, turn) REFERENCES turns(session_id, idx) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    judge TEXT NOT NULL,
    status TEXT NOT NULL,
    score REAL,
    rules TEXT NOT NULL,
    inputs TEXT NOT NULL,
    raw TEXT NOT NULL,
    created_at REAL NOT NULL,
    FOREIGN KEY (session_id, turn) REFERENCES turns(session_id, idx) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS verdicts_turn ON verdicts(session_id, turn);
CREATE TABLE IF NOT EXISTS said (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS said_session ON said(session_id);
CREATE TABLE IF NOT EXISTS learned (
    session_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    step INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    advantage REAL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, turn),
    FOREIGN KEY (session_id, turn) REFERENCES turns(session_id, idx) ON DELETE CASCADE
);
"""
_VERSION = 5

_MIGRATIONS: dict[int, str] = {
    1: "ALTER TABLE sessions ADD COLUMN ended_at REAL;",
    2: "ALTER TABLE turns ADD COLUMN versions BLOB; ALTER TABLE turns ADD COLUMN temperature REAL;",
    3: "ALTER TABLE turns ADD COLUMN top_p REAL; ALTER TABLE turns ADD COLUMN top_k INTEGER;",
}
"""From version N to N+1: what :data:`_SCHEMA`'s ``CREATE ... IF NOT EXISTS`` cannot do to an
existing file (new tables and indexes come from the schema itself)."""


def _ints(blob: bytes) -> list[int]:
    a = array("i")
    a.frombytes(blob)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


def _floats(blob: bytes) -> list[float]:
    a = array("d")
    a.frombytes(blob)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


def _blob(kind: str, values: list[int] | list[float]) -> bytes:
    a = array(kind, values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _verdict(r: tuple[Any, ...]) -> Verdict:
    return Verdict(
        session_id=r[0],
        turn=r[1],
        judge=r[2],
        status=r[3],
        score=r[4],
        rules=tuple(json.loads(r[5])),
        inputs=json.loads(r[6]),
        raw=r[7],
        created_at=r[8],
    )


class SqliteStore:
    """The :class:`TurnStore` in one SQLite file (see the module docstring). Thread-safe: one
    connection behind a lock (`lego serve` writes from one worker thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.path = str(Path(self.path).expanduser())
            # Created private to this user; SQLite gives its -wal and -shm files the same mode. Only when it
            # does not exist: closing any descriptor of an open database drops every POSIX lock this process
            # holds on it, so another connection here (the server's) would run unlocked -- SQLite's own
            # warning; four sessions ending at once in one process broke the file ("disk I/O error").
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA secure_delete=ON")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > _VERSION:
            raise LegoError(
                f"{self.path} is a lego store of version {version}; this lego reads versions up to {_VERSION}: "
                "upgrade lego"
            )
        if version < _VERSION:
            self._upgrade(version)

    def _upgrade(self, version: int) -> None:
        """Bring a file of schema ``version`` (0: a new one) to :data:`_VERSION` in one transaction."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have upgraded it between the check and the lock.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version:
                for step in range(version, _VERSION):
                    for statement in _MIGRATIONS.get(step, "").split(";"):
                        if statement.strip():
                            db.execute(statement)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ sessions
    def register_session(self, session_id: str, *, private: bool, label: str = "") -> SessionRow:
        """Opt ``session_id`` in (a private one: served and counted, never written). Registering an id
        again keeps its turns and opens it again (not ended); its privacy can only be raised (a private
        session stays private)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO sessions (id, private, label, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET private = MAX(private, excluded.private), ended_at = NULL, "
                "label = CASE WHEN MAX(private, excluded.private) THEN '' ELSE excluded.label END",
                (session_id, int(private), "" if private else label, time.time()),
            )
        row = self.session(session_id)
        assert row is not None
        return row

    def session(self, session_id: str) -> SessionRow | None:
        rows = self._sessions("WHERE s.id = ?", (session_id,))
        return rows[0] if rows else None

    def sessions(self) -> list[SessionRow]:
        return self._sessions("", ())

    def _sessions(self, where: str, args: tuple[Any, ...]) -> list[SessionRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT s.id, s.private, s.label, s.created_at, s.private_turns, "
                "(SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id), "
                "(SELECT COUNT(*) FROM feedback f WHERE f.session_id = s.id), s.ended_at "
                f"FROM sessions s {where} ORDER BY s.created_at",
                args,
            ).fetchall()
        return [
            SessionRow(
                id=r[0],
                private=bool(r[1]),
                label=r[2],
                created_at=r[3],
                turns=r[4] + r[5],
                feedback=r[6],
                ended_at=r[7],
            )
            for r in rows
        ]

    def end_session(self, session_id: str) -> bool:
        """Mark the session ended (its key revoked: no turn follows its last one); False: no such
        session or it had ended already."""
        with self._lock:
            n = self._db.execute(
                "UPDATE sessions SET ended_at = ? WHERE id = ? AND ended_at IS NULL", (time.time(), session_id)
            ).rowcount
        return bool(n)

    def end_open_sessions(self) -> int:
        """Mark every session not ended as ended (a server starting or stopping: the keys of the
        sessions it or a killed predecessor opened are gone); returns how many."""
        with self._lock:
            n = self._db.execute("UPDATE sessions SET ended_at = ? WHERE ended_at IS NULL", (time.time(),)).rowcount
        return int(n)

    # ------------------------------------------------------------------ writes
    def add_turn(self, record: TurnRecord) -> int:
        """Write one (redacted) turn of a registered, non-private session; returns its index once committed."""
        tokens = record.tokens
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT private FROM sessions WHERE id = ?", (record.session_id,)).fetchone()
                if row is None or row[0]:
                    why = "is not registered (not opted in)" if row is None else "is private"
                    raise NotRecordedError(f"session {record.session_id!r} {why}: its turns are not written")
                index = db.execute(
                    "SELECT COALESCE(MAX(idx), -1) + 1 FROM turns WHERE session_id = ?", (record.session_id,)
                ).fetchone()[0]
                db.execute(
                    "INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.session_id,
                        index,
                        record.created_at,
                        record.thread,
                        int(record.main),
                        record.api,
                        json.dumps(record.messages, ensure_ascii=False),
                        json.dumps(record.tools, ensure_ascii=False),
                        json.dumps(record.reply, ensure_ascii=False),
                        record.reasoning,
                        _blob("i", tokens.prompt_ids) if tokens else None,
                        _blob("i", tokens.output_ids) if tokens else None,
                        _blob("d", tokens.logprobs) if tokens else None,
                        record.finish_reason,
                        record.policy_version,
                        int(record.constrained),
                        record.redactions,
                        _blob("i", tokens.versions) if tokens and tokens.versions else None,
                        record.temperature,
                        record.top_p,
                        record.top_k,
                    ),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return int(index)

    def count_private_turn(self, session_id: str) -> None:
        """Count a private session's served turn (the count is all that is written of it)."""
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET private_turns = private_turns + 1 WHERE id = ? AND private = 1", (session_id,)
            )

    def add_feedback(self, session_id: str, turn: int | None, score: int, text: str) -> Feedback:
        """Keep a (redacted) verdict beside turn ``turn`` of the session (None: its last turn). KeyError:
        no such session or turn (a private session has none)."""
        if score not in (-1, 1):
            raise ValueError(f"feedback is +1 or -1, not {score}")
        with self._lock:
            db = self._db
            row = db.execute("SELECT private FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                raise KeyError(f"no recorded session {session_id!r}; `lego serve session list` shows them")
            if row[0]:
                raise KeyError(f"session {session_id!r} is private: nothing of it is kept, feedback neither")
            if turn is None:
                turn = db.execute("SELECT MAX(idx) FROM turns WHERE session_id = ?", (session_id,)).fetchone()[0]
                if turn is None:
                    raise KeyError(f"session {session_id!r} has no turns yet")
            elif (
                db.execute("SELECT 1 FROM turns WHERE session_id = ? AND idx = ?", (session_id, turn)).fetchone()
                is None
            ):
                raise KeyError(f"session {session_id!r} has no turn {turn}")
            fb = Feedback(session_id=session_id, turn=int(turn), score=score, text=text, created_at=time.time())
            db.execute(
                "INSERT INTO feedback (session_id, turn, score, text, created_at) VALUES (?, ?, ?, ?, ?)",
                (fb.session_id, fb.turn, fb.score, fb.text, fb.created_at),
            )
        return fb

    def add_said(self, session_id: str, text: str) -> Said | None:
        """Keep a (redacted) message the person's side reports sending to their harness; None for a
        private session (nothing of it is kept). KeyError: no such session."""
        with self._lock:
            row = self._db.execute("SELECT private FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                raise KeyError(f"no recorded session {session_id!r}; `lego serve session list` shows them")
            if row[0]:
                return None
            said = Said(session_id=session_id, text=text, created_at=time.time())
            self._db.execute(
                "INSERT INTO said (session_id, text, created_at) VALUES (?, ?, ?)",
                (said.session_id, said.text, said.created_at),
            )
        return said

    def said(self, session_id: str) -> list[Said]:
        """What the person's side reported saying in the session, oldest first (never a private session's)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT d.session_id, d.text, d.created_at FROM said d JOIN sessions s ON s.id = d.session_id "
                "WHERE d.session_id = ? AND s.private = 0 ORDER BY d.id",
                (session_id,),
            ).fetchall()
        return [Said(*r) for r in rows]

    def add_verdict(self, verdict: Verdict) -> None:
        """Keep a judge's (redacted) verdict beside its turn. KeyError: no such turn (or a private session's)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                found = db.execute(
                    "SELECT 1 FROM turns t JOIN sessions s ON s.id = t.session_id "
                    "WHERE t.session_id = ? AND t.idx = ? AND s.private = 0",
                    (verdict.session_id, verdict.turn),
                ).fetchone()
                if found is None:
                    raise KeyError(f"session {verdict.session_id!r} has no recorded turn {verdict.turn}")
                db.execute(
                    "INSERT INTO verdicts (session_id, turn, judge, status, score, rules, inputs, raw, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        verdict.session_id,
                        verdict.turn,
                        verdict.judge,
                        verdict.status,
                        verdict.score,
                        json.dumps(list(verdict.rules)),
                        json.dumps(verdict.inputs, ensure_ascii=False),
                        verdict.raw,
                        verdict.created_at,
                    ),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def mark_learned(self, rows: list[tuple[str, int, int, str, float | None]]) -> None:
        """Record what the learner did with turns, in one transaction: ``(session_id, turn, step,
        outcome, advantage)``; outcome ``trained`` (in step ``step``) or why it never will be."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT OR REPLACE INTO learned (session_id, turn, step, outcome, advantage, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(*r, time.time()) for r in rows],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def learned(self) -> dict[tuple[str, int], tuple[int, str]]:
        """Every turn the learner has dealt with: ``(session_id, turn) -> (step, outcome)``."""
        with self._lock:
            rows = self._db.execute("SELECT session_id, turn, step, outcome FROM learned").fetchall()
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}

    def unlearn_after(self, step: int) -> int:
        """Forget the learner's marks of steps after ``step`` (their update was never checkpointed, or was
        rolled back): those turns can be trained again. Returns how many marks were dropped."""
        with self._lock:
            n = self._db.execute("DELETE FROM learned WHERE step > ?", (step,)).rowcount
        return int(n)

    # ------------------------------------------------------------------ reads
    def verdicts(self, *, session_id: str | None = None, judge: str | None = None) -> list[Verdict]:
        """Verdicts in the order they were written, of one session and/or one judge (None: all)."""
        where, args = self._verdict_filter(session_id, judge)
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id, turn, judge, status, score, rules, inputs, raw, created_at FROM verdicts "
                f"{where} ORDER BY id",
                args,
            ).fetchall()
        return [_verdict(r) for r in rows]

    @staticmethod
    def _verdict_filter(session_id: str | None, judge: str | None) -> tuple[str, list[Any]]:
        clauses, args = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            args.append(session_id)
        if judge is not None:
            clauses.append("judge = ?")
            args.append(judge)
        return ("WHERE " + " AND ".join(clauses)) if clauses else "", args

    def iter_turns(self, *, session_id: str | None = None, with_tokens: bool = False) -> Iterator[TurnRecord]:
        """The written turns in session and turn order, each with its feedback -- never a private
        session's. ``with_tokens``: only turns whose token ids were kept (what token-level training
        can use). Reads a snapshot: turns written meanwhile are not in it."""
        where = ["s.private = 0"]
        args: list[Any] = []
        if session_id is not None:
            where.append("t.session_id = ?")
            args.append(session_id)
        if with_tokens:
            where.append("t.prompt_ids IS NOT NULL")
        with self._lock:
            rows = self._db.execute(
                "SELECT t.* FROM turns t JOIN sessions s ON s.id = t.session_id "
                f"WHERE {' AND '.join(where)} ORDER BY s.created_at, t.session_id, t.idx",
                args,
            ).fetchall()
            feedback: dict[tuple[str, int], list[Feedback]] = {}
            for f in self._db.execute(
                "SELECT session_id, turn, score, text, created_at FROM feedback ORDER BY id"
            ).fetchall():
                feedback.setdefault((f[0], f[1]), []).append(Feedback(*f))
            verdicts: dict[tuple[str, int], list[Verdict]] = {}
            vwhere, vargs = self._verdict_filter(session_id, None)
            for v in self._db.execute(
                "SELECT session_id, turn, judge, status, score, rules, inputs, raw, created_at FROM verdicts "
                f"{vwhere} ORDER BY id",
                vargs,
            ).fetchall():
                verdicts.setdefault((v[0], v[1]), []).append(_verdict(v))
        for r in rows:
            tokens = (
                TokenRecord(
                    prompt_ids=_ints(r[10]),
                    output_ids=_ints(r[11]),
                    logprobs=_floats(r[12]),
                    versions=_ints(r[17]) if r[17] is not None else [],
                )
                if r[10] is not None
                else None
            )
            yield TurnRecord(
                session_id=r[0],
                index=r[1],
                created_at=r[2],
                thread=r[3],
                main=bool(r[4]),
                api=r[5],
                messages=json.loads(r[6]),
                tools=json.loads(r[7]),
                reply=json.loads(r[8]),
                reasoning=r[9],
                tokens=tokens,
                finish_reason=r[13],
                policy_version=r[14],
                constrained=bool(r[15]),
                redactions=r[16],
                temperature=r[18],
                top_p=r[19],
                top_k=r[20],
                feedback=tuple(feedback.get((r[0], r[1]), ())),
                verdicts=tuple(verdicts.get((r[0], r[1]), ())),
            )

    # ------------------------------------------------------------------ deletion
    def purge(self, session_id: str | None = None) -> int:
        """Delete one session (None: every session) with its turns, feedback and verdicts; returns the sessions
        deleted. Its key, if still open on a server, serves on but records nothing more."""
        with self._lock:
            if session_id is None:
                n = self._db.execute("DELETE FROM sessions").rowcount
            else:
                n = self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
            self._checkpoint()
        return int(n)

    def delete_before(self, cutoff: float) -> int:
        """Retention: delete turns (and their feedback and verdicts) and the person's messages written before
        ``cutoff`` (a Unix time), and sessions registered before it that have no turns left; returns the
        turns deleted."""
        with self._lock:
            n = self._db.execute("DELETE FROM turns WHERE created_at < ?", (cutoff,)).rowcount
            self._db.execute("DELETE FROM said WHERE created_at < ?", (cutoff,))
            self._db.execute(
                "DELETE FROM sessions WHERE created_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM turns t WHERE t.session_id = sessions.id)",
                (cutoff,),
            )
            self._checkpoint()
        return int(n)

    def _checkpoint(self) -> None:
        # The WAL still holds the deleted rows' old pages until they are copied back and it is cut.
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._db.close()
