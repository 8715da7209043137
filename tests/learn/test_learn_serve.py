"""`lego serve` through the real path: a real server, the official SDKs on the model face, the store on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from click.testing import CliRunner

from lego.conductor.cli.main import cli
from lego.engines.scripted import ScriptedEngine
from lego.learn.server import ControlClient, LearnServer
from lego.learn.store import SqliteStore

BASH = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
OPENAI_KEY = "sk-proj-Xq3vT9bL2mN7pR4sW8yZ1aC5dE6fG0hJ2kL4mN6pQ8rS0tU2vW4xY6zA8bC0dE2fG4hJ6kL8"
GITHUB = "ghp_R8sT2uV4wX6yZ8aB0cD2eF4gH6iJ8kL0mN2o"
DB_PASSWORD = "correct-horse-battery-9"
DOTENV = f"OPENAI_API_KEY={OPENAI_KEY}\nDB_PASSWORD={DB_PASSWORD}\nDEBUG=true\n"


def sdk(server: LearnServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.model_url}/v1", api_key=key, max_retries=0)


def store_of(server: LearnServer) -> SqliteStore:
    return SqliteStore(server.dir / "learn.db")


def test_every_api_records_its_turns_into_the_session_the_key_names(served: Any) -> None:
    server, engine, client = served
    opened = client.new_session(private=False, label="four apis")
    env = opened.env()
    assert env["OPENAI_BASE_URL"] == f"{server.model_url}/v1" and env["ANTHROPIC_API_KEY"] == opened.key
    engine.push("chat reply<|im_end|>", "streamed reply<|im_end|>", "messages reply<|im_end|>")
    engine.push("responses reply<|im_end|>", "gemini reply<|im_end|>")
    oa = sdk(server, opened.key)
    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    chunks = list(oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}], stream=True))
    assert chunks
    ant = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], api_key=opened.key, max_retries=0)
    ant.messages.create(model="m", max_tokens=32, messages=[{"role": "user", "content": "msg"}])
    oa.responses.create(model="m", input="resp")
    r = httpx.post(
        f"{server.model_url}/v1beta/models/m:generateContent",
        headers={"x-goog-api-key": opened.key},
        json={"contents": [{"role": "user", "parts": [{"text": "gem"}]}]},
    )
    assert r.status_code == 200, r.text
    store = store_of(server)
    turns = list(store.iter_turns(session_id=opened.row.id))
    assert [t.api for t in turns] == ["chat", "chat", "messages", "responses", "gemini"]
    assert [t.reply["content"] for t in turns] == [
        "chat reply",
        "streamed reply",
        "messages reply",
        "responses reply",
        "gemini reply",
    ]
    first = turns[0]
    assert first.tokens is not None and first.redactions == 0
    assert len(first.tokens.output_ids) == len(first.tokens.logprobs) > 0
    assert all(lp <= 0 for lp in first.tokens.logprobs)
    assert first.messages[-1] == {"role": "user", "content": "hi"}
    assert store.sessions()[0].turns == 5


def test_secrets_in_the_conversation_and_the_reply_never_reach_the_database(served: Any, store_bytes: Any) -> None:
    server, engine, client = served
    opened = client.new_session(private=False)
    call = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat .env"}}\n</tool_call><|im_end|>'
    engine.push(call, f"Your key is {OPENAI_KEY}; use {GITHUB} for git.<|im_end|>")
    oa = sdk(server, opened.key)
    messages: list[Any] = [{"role": "user", "content": f"deploy it (my harness key is {opened.key})"}]
    first = oa.chat.completions.create(model="m", messages=messages, tools=BASH)
    tool_call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": tool_call.id, "content": DOTENV},
    ]
    second = oa.chat.completions.create(model="m", messages=messages, tools=BASH)
    assert OPENAI_KEY in second.choices[0].message.content  # the harness got the real reply
    store = store_of(server)
    t0, t1 = store.iter_turns(session_id=opened.row.id)
    # The harness's own key is in turn 0's prompt: redacted in the text, and its ids are not kept.
    assert t0.tokens is None and "[REDACTED:literal]" in t0.messages[0]["content"]
    assert t1.tokens is None and t1.redactions >= 4
    assert t1.messages[-1]["content"].startswith("OPENAI_API_KEY=[REDACTED:openai_key]\nDB_PASSWORD=[REDACTED:")
    assert t1.reply["content"] == "Your key is [REDACTED:openai_key]; use [REDACTED:github_token] for git."
    assert list(store.iter_turns(with_tokens=True)) == []
    store.close()
    data = store_bytes(server.dir)
    for secret in (OPENAI_KEY, GITHUB, DB_PASSWORD, opened.key):
        assert secret.encode() not in data
    assert b"[REDACTED:openai_key]" in data


def test_a_turn_without_secrets_keeps_its_ids_and_they_decode_to_what_was_said(served: Any, chat_format: Any) -> None:
    server, engine, client = served
    opened = client.new_session(private=False)
    engine.push("plain answer<|im_end|>")
    sdk(server, opened.key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "plain q"}], temperature=0.7
    )
    (turn,) = store_of(server).iter_turns(with_tokens=True)
    assert turn.tokens is not None
    assert "plain q" in chat_format.decode(turn.tokens.prompt_ids)
    assert chat_format.decode(turn.tokens.output_ids).startswith("plain answer")
    # What a learner needs to train on it exactly: the version of each sampled token and the temperature.
    assert turn.tokens.versions == [0] * len(turn.tokens.output_ids) and turn.temperature == 0.7


def test_a_private_session_is_served_and_absent_from_every_batch(served: Any, store_bytes: Any) -> None:
    server, engine, client = served
    private = client.new_session(private=True, label="salary negotiation")
    public = client.new_session(private=False)
    engine.push("private-reply-marker<|im_end|>", "public reply<|im_end|>")
    reply = sdk(server, private.key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "private-question-marker"}]
    )
    assert reply.choices[0].message.content == "private-reply-marker"
    sdk(server, public.key).chat.completions.create(model="m", messages=[{"role": "user", "content": "public q"}])
    store = store_of(server)
    for kwargs in ({}, {"with_tokens": True}, {"session_id": private.row.id}):
        assert all(t.session_id != private.row.id for t in store.iter_turns(**kwargs))
    assert [t.session_id for t in store.iter_turns()] == [public.row.id]
    rows = {r.id: r for r in store.sessions()}
    assert rows[private.row.id].private and rows[private.row.id].turns == 1
    r = client.http.post(f"/s/{private.row.id}/feedback", json={"score": 1})
    assert r.status_code == 404 and "private" in r.text
    store.close()
    data = store_bytes(server.dir)
    for marker in (b"private-question-marker", b"private-reply-marker", b"salary negotiation"):
        assert marker not in data


def test_a_session_opened_without_registering_is_served_but_not_recorded(served: Any) -> None:
    server, engine, client = served
    token = client.http.post("/s/unregistered", json={}).json()["token"]
    engine.push("fine<|im_end|>")
    sdk(server, token).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert list(store_of(server).iter_turns()) == []
    bad = httpx.post(f"{server.model_url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "q"}]})
    assert bad.status_code == 401  # no key, no session: nothing served on the model face


def test_feedback_round_trips_through_the_control_face_and_the_cli(served: Any) -> None:
    server, engine, client = served
    opened = client.new_session(private=False)
    engine.push("one<|im_end|>", "two<|im_end|>")
    oa = sdk(server, opened.key)
    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    got = client.feedback(opened.row.id, -1, 0, f"wrong; it printed {GITHUB}")
    assert got == {
        "session_id": opened.row.id,
        "turn": 0,
        "score": -1,
        "text": "wrong; it printed [REDACTED:github_token]",
    }
    assert client.http.post(f"/s/{opened.row.id}/feedback", json={"score": 2}).status_code == 400
    assert client.http.post(f"/s/{opened.row.id}/feedback", json={"score": 1, "turn": 9}).status_code == 404
    # The model face has no feedback route: a harness cannot grade itself.
    own = httpx.post(
        f"{server.model_url}/s/{opened.row.id}/feedback",
        headers={"authorization": f"Bearer {opened.key}"},
        json={"score": 1},
    )
    assert own.status_code in (404, 405)
    res = CliRunner().invoke(cli, ["feedback", opened.row.id, "+1", "that", "fixed", "it", "--dir", str(server.dir)])
    assert res.exit_code == 0, res.output
    assert "turn 1" in res.output
    res = CliRunner().invoke(cli, ["feedback", opened.row.id, "0", "-1", "--dir", str(server.dir)])
    assert res.exit_code == 0, res.output
    by_turn = {t.index: [(f.score, f.text) for f in t.feedback] for t in store_of(server).iter_turns()}
    assert by_turn == {0: [(-1, "wrong; it printed [REDACTED:github_token]"), (-1, "")], 1: [(1, "that fixed it")]}


def test_what_the_person_said_is_kept_redacted_per_session_and_never_for_a_private_one(
    served: Any, store_bytes: Any
) -> None:
    """``POST /s/{session}/said`` (ControlClient.said): the person's side reports each message before sending
    it; kept redacted, oldest first, nothing for a private session, gone with a purge; the model face has no
    such route (an agent cannot vouch for its own words)."""
    server, _, client = served
    opened = client.new_session(private=False)
    sid = opened.row.id
    assert client.said(sid, "fix the parser") and client.said(sid, f"It still fails; my token is {GITHUB}")
    private = client.new_session(private=True)
    assert client.said(private.row.id, "private-said-marker") is False
    assert client.http.post(f"/s/{sid}/said", json={"text": ""}).status_code == 400
    assert client.http.post("/s/nosuch/said", json={"text": "x"}).status_code == 404
    own = httpx.post(
        f"{server.model_url}/s/{sid}/said", headers={"authorization": f"Bearer {opened.key}"}, json={"text": "thanks"}
    )
    assert own.status_code in (404, 405)
    store = store_of(server)
    assert [s.text for s in store.said(sid)] == [
        "fix the parser",
        "It still fails; my token is [REDACTED:github_token]",
    ]
    assert store.said(private.row.id) == [] and b"private-said-marker" not in store_bytes(server.dir)
    assert GITHUB.encode() not in store_bytes(server.dir)
    assert store.purge(sid) == 1 and store.said(sid) == [] and b"fix the parser" not in store_bytes(server.dir)


def test_export_and_purge_from_the_cli(served: Any, tmp_path: Path, store_bytes: Any) -> None:
    server, engine, client = served
    keep = client.new_session(private=False, label="keep")
    drop = client.new_session(private=False, label="drop")
    engine.push("kept-reply<|im_end|>", "dropped-reply-marker<|im_end|>")
    sdk(server, keep.key).chat.completions.create(model="m", messages=[{"role": "user", "content": "k"}])
    sdk(server, drop.key).chat.completions.create(model="m", messages=[{"role": "user", "content": "d"}])
    client.feedback(keep.row.id, 1)
    d = ["--dir", str(server.dir)]
    out = tmp_path / "turns.jsonl"
    res = CliRunner().invoke(cli, ["serve", *d, "export", str(out)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["session_id"], x["turn"]) for x in lines] == [(keep.row.id, 0), (drop.row.id, 0)]
    assert lines[0]["feedback"][0]["score"] == 1 and lines[0]["output_ids"] and lines[0]["logprobs"]
    res = CliRunner().invoke(cli, ["serve", *d, "session", "list"])
    assert keep.row.id in res.output and "drop" in res.output
    res = CliRunner().invoke(cli, ["serve", *d, "purge", "--session", drop.row.id])
    assert res.exit_code == 0 and "purged 1 session" in res.output, res.output
    assert b"dropped-reply-marker" not in store_bytes(server.dir)
    assert [t.session_id for t in store_of(server).iter_turns()] == [keep.row.id]
    assert CliRunner().invoke(cli, ["serve", *d, "purge"]).exit_code == 2
    res = CliRunner().invoke(cli, ["serve", *d, "purge", "--all", "--yes"])
    assert res.exit_code == 0, res.output
    assert list(store_of(server).iter_turns()) == []
    # A purged session's key still serves, but nothing more of it is written.
    engine.push("after purge<|im_end|>")
    sdk(server, keep.key).chat.completions.create(model="m", messages=[{"role": "user", "content": "k2"}])
    assert list(store_of(server).iter_turns()) == []


def _exports(stdout: str) -> dict[str, str]:
    """The variables `lego serve session new` prints as `export NAME=VALUE` lines."""
    return dict(line.removeprefix("export ").split("=", 1) for line in stdout.splitlines())


def test_session_new_and_end_from_the_cli(served: Any) -> None:
    server, engine, _ = served
    d = ["--dir", str(server.dir)]
    res = CliRunner().invoke(cli, ["serve", *d, "session", "new", "--id", "mine", "--label", "cli"])
    assert res.exit_code == 0, res.output
    exports = _exports(res.stdout)
    assert exports["OPENAI_BASE_URL"] == f"{server.model_url}/v1"
    engine.push("hello<|im_end|>")
    oa = openai.OpenAI(base_url=exports["OPENAI_BASE_URL"], api_key=exports["OPENAI_API_KEY"], max_retries=0)
    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert [t.session_id for t in store_of(server).iter_turns()] == ["mine"]
    res = CliRunner().invoke(cli, ["serve", *d, "session", "end", "mine"])
    assert res.exit_code == 0, res.output
    try:
        oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        raise AssertionError("an ended session's key must stop working")
    except openai.AuthenticationError:
        pass


def test_a_store_that_cannot_write_fails_the_call_instead_of_acknowledging_it(served: Any) -> None:
    server, engine, client = served
    opened = client.new_session(private=False)
    engine.push("unkept<|im_end|>")
    server.store.close()  # the server's own connection is gone: every write fails
    try:
        sdk(server, opened.key).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        raise AssertionError("a reply that was not stored must not be acknowledged")
    except openai.APIStatusError as exc:
        assert exc.status_code == 503 and "could not be stored" in str(exc)
    server.store = store_of(server)  # so the fixture's stop() closes a live one
    server.recorder.store = server.store


def test_a_second_server_on_the_same_directory_is_refused(served: Any, tiny_engine: Any, chat_format: Any) -> None:
    import pytest

    from lego.config import ProxyConfig, ServeConfig
    from lego.errors import ConfigError

    server, _, _ = served
    other = LearnServer(
        ScriptedEngine(tiny_engine, chat_format), chat_format, ProxyConfig(), ServeConfig(dir=str(server.dir), port=0)
    )
    with pytest.raises(ConfigError, match="another `lego serve`"):
        other.start()
    other.store.close()
    assert ControlClient.connect(server.dir).http.get("/healthz").status_code == 200


def test_a_real_harness_configured_only_by_the_session_env_is_recorded_redacted(
    served: Any, tmp_path: Path, store_bytes: Any
) -> None:
    """lego-agent, unmodified, pointed at `lego serve` by the two variables `session new` exports."""
    import os
    import subprocess
    import sys

    server, engine, _ = served
    res = CliRunner().invoke(cli, ["serve", "--dir", str(server.dir), "session", "new", "--id", "agent"])
    assert res.exit_code == 0, res.output
    exports = _exports(res.stdout)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".env").write_text(DOTENV)
    engine.push(
        '<tool_call>\n{"name": "bash", "arguments": {"command": "cat .env"}}\n</tool_call><|im_end|>',
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>',
    )
    env = {**os.environ, "OPENAI_API_KEY": exports["OPENAI_API_KEY"]}
    agent = [sys.executable, "-m", "lego.harnesses.lego_agent", "--base-url", exports["OPENAI_BASE_URL"]]
    done = subprocess.run(
        [*agent, "--problem", "print the settings", "--repo", str(repo), "--max-turns", "4", "--retries", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    turns = list(store_of(server).iter_turns(session_id="agent"))
    assert [(t.main, t.api) for t in turns] == [(True, "chat"), (True, "chat")]
    assert turns[0].tokens is not None  # nothing secret in it yet: its ids are kept
    observation = turns[1].messages[-1]["content"]
    assert "[REDACTED:openai_key]" in observation and "DEBUG=true" in observation
    assert turns[1].tokens is None
    data = store_bytes(server.dir)
    for secret in (OPENAI_KEY, DB_PASSWORD, exports["OPENAI_API_KEY"]):
        assert secret.encode() not in data


def test_the_banners_commands_find_a_server_started_with_dir(
    tiny_engine: Any, chat_format: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: `lego serve --dir X` prints `eval "$(lego serve session new)"`; that command and
    `lego feedback` name no directory, and find X while the server runs (not once it stopped)."""
    from lego.config import ProxyConfig, ServeConfig

    monkeypatch.setenv("LEGO_DATA_DIR", str(tmp_path / "data"))
    engine = ScriptedEngine(tiny_engine, chat_format)
    serve = ServeConfig(dir=str(tmp_path / "elsewhere"), port=0)
    with LearnServer(engine, chat_format, ProxyConfig(default_max_tokens=256), serve) as server:
        res = CliRunner().invoke(cli, ["serve", "session", "new", "--id", "banner"])
        assert res.exit_code == 0, res.output
        exports = _exports(res.stdout)
        assert exports["OPENAI_BASE_URL"] == f"{server.model_url}/v1"
        engine.push("hi<|im_end|>")
        oa = openai.OpenAI(base_url=exports["OPENAI_BASE_URL"], api_key=exports["OPENAI_API_KEY"], max_retries=0)
        oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        fb = CliRunner().invoke(cli, ["feedback", "banner", "+1"])
        assert fb.exit_code == 0, fb.output
    assert not (tmp_path / "data" / "serve.current").exists()  # a stopped server is forgotten
