"""The SQLite store on its own: round trip, opt-in, privacy, feedback, retention, purge down to the file bytes."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from lego.errors import LegoError
from lego.learn.records import TokenRecord, TurnRecord, Verdict
from lego.learn.store import NotRecordedError, SqliteStore


def record(session_id: str, text: str = "hello", *, tokens: bool = True, created_at: float | None = None) -> TurnRecord:
    return TurnRecord(
        session_id=session_id,
        thread="main",
        main=True,
        api="chat",
        messages=[{"role": "user", "content": text}],
        tools=[],
        reply={"role": "assistant", "content": f"re: {text}"},
        reasoning="",
        tokens=TokenRecord(prompt_ids=[1, 2, 70000], output_ids=[5, 6], logprobs=[-0.25, -1.5]) if tokens else None,
        finish_reason="stop",
        policy_version=3,
        constrained=False,
        redactions=0 if tokens else 1,
        created_at=time.time() if created_at is None else created_at,
    )


def test_a_turn_round_trips_with_exact_ids_and_logprobs(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "learn.db")
    store.register_session("a", private=False, label="fix it")
    assert store.add_turn(record("a", "one")) == 0
    assert store.add_turn(record("a", "two", tokens=False)) == 1
    store.close()
    store = SqliteStore(tmp_path / "learn.db")  # a fresh connection reads what was committed
    turns = list(store.iter_turns())
    assert [t.index for t in turns] == [0, 1]
    assert turns[0].tokens == TokenRecord(prompt_ids=[1, 2, 70000], output_ids=[5, 6], logprobs=[-0.25, -1.5])
    assert turns[0].messages == [{"role": "user", "content": "one"}] and turns[0].policy_version == 3
    assert turns[1].tokens is None
    assert [t.index for t in store.iter_turns(with_tokens=True)] == [0]
    (row,) = store.sessions()
    assert (row.id, row.private, row.label, row.turns) == ("a", False, "fix it", 2)
    mode = sqlite3.connect(tmp_path / "learn.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.glob("learn.db*")}["learn.db"] == 0o600


def test_only_registered_sessions_are_written_and_a_private_one_only_counted(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "learn.db")
    with pytest.raises(NotRecordedError, match="not registered"):
        store.add_turn(record("stranger"))
    store.register_session("p", private=True, label="my secret project")
    with pytest.raises(NotRecordedError, match="private"):
        store.add_turn(record("p", "private words"))
    store.count_private_turn("p")
    store.register_session("p", private=False)  # privacy is never lowered
    store.register_session("q", private=False)
    store.add_turn(record("q", "public words"))
    assert [t.session_id for t in store.iter_turns()] == ["q"]
    rows = {r.id: r for r in store.sessions()}
    assert rows["p"].private and rows["p"].turns == 1 and rows["p"].label == ""
    with pytest.raises(KeyError, match="private"):
        store.add_feedback("p", None, 1, "")
    store.close()
    data = b"".join(p.read_bytes() for p in tmp_path.glob("learn.db*"))
    assert b"private words" not in data and b"my secret project" not in data
    assert b"public words" in data


def test_feedback_sits_beside_its_turn_and_defaults_to_the_last(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "learn.db")
    store.register_session("a", private=False)
    with pytest.raises(KeyError, match="no turns"):
        store.add_feedback("a", None, 1, "")
    for text in ("x", "y", "z"):
        store.add_turn(record("a", text))
    assert store.add_feedback("a", None, 1, "good").turn == 2
    store.add_feedback("a", 0, -1, "wrong file")
    with pytest.raises(KeyError, match="no turn 7"):
        store.add_feedback("a", 7, 1, "")
    with pytest.raises(KeyError, match="no recorded session"):
        store.add_feedback("nope", None, 1, "")
    by_turn = {t.index: [(f.score, f.text) for f in t.feedback] for t in store.iter_turns()}
    assert by_turn == {0: [(-1, "wrong file")], 1: [], 2: [(1, "good")]}
    assert store.sessions()[0].feedback == 2


def test_retention_deletes_old_turns_and_purge_leaves_no_byte_of_them(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "learn.db")
    store.register_session("a", private=False)
    store.register_session("b", private=False)
    old = time.time() - 40 * 86400
    store.add_turn(record("a", "ancient-marker-text", created_at=old))
    store.add_turn(record("a", "recent-marker-text"))
    store.add_turn(record("b", "other-session-marker"))
    store.add_feedback("a", 0, 1, "old-feedback-marker")
    assert store.delete_before(time.time() - 30 * 86400) == 1
    assert [t.messages[0]["content"] for t in store.iter_turns(session_id="a")] == ["recent-marker-text"]

    def files() -> bytes:
        return b"".join(p.read_bytes() for p in tmp_path.glob("learn.db*"))

    assert b"ancient-marker-text" not in files() and b"old-feedback-marker" not in files()
    assert store.purge("a") == 1
    assert b"recent-marker-text" not in files() and b"other-session-marker" in files()
    assert [r.id for r in store.sessions()] == ["b"]
    assert store.purge() == 1
    assert b"other-session-marker" not in files()
    assert list(store.iter_turns()) == []


def test_turn_indices_stay_dense_under_concurrent_writers(tmp_path: Path) -> None:
    import threading

    store = SqliteStore(tmp_path / "learn.db")
    store.register_session("a", private=False)
    other = SqliteStore(tmp_path / "learn.db")  # a second process's connection, as the CLI's
    errors: list[Any] = []

    def write(s: SqliteStore) -> None:
        try:
            for i in range(20):
                s.add_turn(record("a", str(i)))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in (store, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [t.index for t in store.iter_turns()] == list(range(40))


# The schema lego wrote as version 1 (before verdicts and ended sessions), as a user's file still holds it.
SCHEMA_V1 = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, private INTEGER NOT NULL, label TEXT NOT NULL,
    created_at REAL NOT NULL, private_turns INTEGER NOT NULL DEFAULT 0);
CREATE TABLE turns (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, idx INTEGER NOT NULL,
    created_at REAL NOT NULL, thread TEXT NOT NULL, main INTEGER NOT NULL, api TEXT NOT NULL, messages TEXT NOT NULL,
    tools TEXT NOT NULL, reply TEXT NOT NULL, reasoning TEXT NOT NULL, prompt_ids BLOB, output_ids BLOB, logprobs BLOB,
    finish_reason TEXT NOT NULL, policy_version INTEGER NOT NULL, constrained INTEGER NOT NULL,
    redactions INTEGER NOT NULL, PRIMARY KEY (session_id, idx));
CREATE INDEX turns_created ON turns(created_at);
CREATE TABLE feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, turn INTEGER NOT NULL,
    score INTEGER NOT NULL, text TEXT NOT NULL, created_at REAL NOT NULL,
    FOREIGN KEY (session_id, turn) REFERENCES turns(session_id, idx) ON DELETE CASCADE);
INSERT INTO sessions VALUES ('old', 0, 'from version 1', 1000.0, 0);
INSERT INTO turns VALUES ('old', 0, 1000.5, 'main', 1, 'chat', '[{"role": "user", "content": "q"}]', '[]',
    '{"role": "assistant", "content": "a"}', '', NULL, NULL, NULL, 'stop', 0, 0, 0);
INSERT INTO feedback (session_id, turn, score, text, created_at) VALUES ('old', 0, 1, 'good', 1001.0);
PRAGMA user_version=1;
"""


def verdict(session_id: str, turn: int, score: float | None = 0.5) -> Verdict:
    return Verdict(
        session_id=session_id,
        turn=turn,
        judge="rules",
        status="scored" if score is not None else "no_signal",
        score=score,
        rules=("tests_pass",) if score is not None else (),
        inputs={"next_state": {"turn": turn}},
        raw="",
    )


def test_a_version_1_database_is_migrated_in_place_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "learn.db"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA_V1)
    old.close()
    store = SqliteStore(path)
    (row,) = store.sessions()
    assert (row.id, row.label, row.turns, row.feedback, row.ended_at) == ("old", "from version 1", 1, 1, None)
    (t,) = store.iter_turns()
    assert t.reply == {"role": "assistant", "content": "a"} and [f.text for f in t.feedback] == ["good"]
    store.add_verdict(verdict("old", 0))
    assert store.end_session("old") and not store.end_session("old")
    store.close()
    store = SqliteStore(path)  # reopened: version 5 now, nothing migrated twice
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 5
    assert store.add_said("old", "it still fails") is not None  # version 5's table is there
    (t,) = store.iter_turns()
    assert (t.temperature, t.top_p, t.top_k) == (None, None, None)  # unrecorded stays unknown, never made up
    assert [(v.judge, v.score, v.rules) for v in t.verdicts] == [("rules", 0.5, ("tests_pass",))]
    assert store.sessions()[0].ended_at is not None
    store.close()
    sqlite3.connect(path).execute("PRAGMA user_version=9").connection.commit()
    with pytest.raises(LegoError, match="version 9; this lego reads versions up to 5"):
        SqliteStore(path)


def test_verdicts_sit_beside_their_turns_and_go_with_them(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "learn.db")
    store.register_session("a", private=False)
    store.register_session("p", private=True)
    store.add_turn(record("a", "one"))
    store.add_turn(record("a", "two"))
    store.add_verdict(verdict("a", 1, None))
    store.add_verdict(verdict("a", 1, -1.0))
    with pytest.raises(KeyError, match="no recorded turn 5"):
        store.add_verdict(verdict("a", 5))
    with pytest.raises(KeyError):
        store.add_verdict(verdict("p", 0))  # a private session has no turns to judge
    assert [(v.turn, v.status, v.score) for v in store.verdicts(session_id="a")] == [
        (1, "no_signal", None),
        (1, "scored", -1.0),
    ]
    assert store.verdicts(judge="model:x") == []
    exported = [t.to_json()["verdicts"] for t in store.iter_turns()]
    assert exported[0] == [] and [v["score"] for v in exported[1]] == [None, -1.0]
    assert store.end_open_sessions() == 2 and all(r.ended_at is not None for r in store.sessions())
    store.register_session("a", private=False)  # opened again: it may get turns again
    assert store.session("a").ended_at is None  # type: ignore[union-attr]
    store.delete_before(time.time() + 1)
    assert store.verdicts() == []
    store.close()


def test_opening_the_store_again_in_this_process_keeps_the_locks_the_first_holds(tmp_path: Path) -> None:
    """Closing any descriptor of an open SQLite file drops every POSIX lock this process holds on it. A
    second store opened here (the control client beside the server, in one process) must not do that:
    without the server's shared lock, the next reader in another process (`sqlite3 learn.db`) takes
    itself for the last connection when it closes and deletes the WAL under the server's feet, whose
    next write fails with "disk I/O error" (seen in `lego bench use`)."""
    import subprocess
    import sys

    path = tmp_path / "learn.db"
    first = SqliteStore(path)
    first.register_session("s-1", private=False, label="")
    second = SqliteStore(path)  # reopened in the same process
    reader = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.execute('SELECT COUNT(*) FROM sessions'); db.close()"
    subprocess.run([sys.executable, "-c", reader, str(path)], check=True, timeout=60)
    assert Path(f"{path}-wal").exists()  # the reader knew it was not the last connection
    first.register_session("s-2", private=False, label="")  # and the server's connection still writes
    assert [r.id for r in second.sessions()] == ["s-1", "s-2"]
    second.close()
    first.close()
