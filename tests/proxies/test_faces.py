"""The proxy's two faces, attacked as an agent would: through a real ProxyServer and real HTTP.

An agent in a sandbox holds what its harness holds: the model face (a bound Unix socket, or the
TCP listener remote workers forward to) and its session's token (it can read the harness's
command line and environment). With that it must reach its own session's model routes and nothing
else: no other session, no session creation, no trajectory or metadata, no delete, no way to
change the rollout's settings, and never the task's answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lego.config import ProxyConfig
from lego.engines.oracle import OracleEngine
from lego.engines.scripted import ScriptedEngine
from lego.proxies.server import ProxyServer
from lego.seams import TokenSink
from lego.types import Generation, RequestContext, SamplingOverride, SamplingParams, SessionSpec

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
PATCH = "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-SECRET_FIX = 0\n+SECRET_FIX = 1\n"


class ModelFace:
    """An HTTP client of a proxy's model face (its Unix socket or its TCP listener)."""

    def __init__(self, srv: ProxyServer, kind: str) -> None:
        self.srv = srv
        if kind == "uds":
            self.root = "http://localhost"
            self.http = httpx.Client(transport=httpx.HTTPTransport(uds=srv.model_uds), timeout=60)
        else:
            self.root = f"http://127.0.0.1:{srv.listen_tcp('127.0.0.1')}"
            self.http = httpx.Client(timeout=60)

    def request(self, method: str, path: str, key: str | None = None, anthropic: bool = False, **kw: Any) -> Any:
        headers = {}
        if key is not None:
            headers = {"x-api-key": key} if anthropic else {"authorization": f"Bearer {key}"}
        return self.http.request(method, self.root + path, headers=headers, **kw)


@pytest.fixture(params=["uds", "tcp"])
def face(request: pytest.FixtureRequest, scripted: tuple[ProxyServer, ScriptedEngine]) -> Iterator[ModelFace]:
    srv, _ = scripted
    client = ModelFace(srv, request.param)
    yield client
    client.http.close()


def test_no_key_or_a_wrong_key_is_401_in_each_apis_own_shape(face: ModelFace) -> None:
    face.srv.open_session("a")
    for key in (None, "lego-not-a-token", "k"):
        r = face.request("POST", "/v1/chat/completions", key, json=CHAT)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = face.request("POST", "/s/a/v1/messages", key, anthropic=True, json=MESSAGES)
        assert r.status_code == 401 and r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "authentication_error"
        for path in ("/v1/models", "/v1/models/m"):
            assert face.request("GET", path, key).status_code == 401
        assert face.request("POST", "/v1/messages/count_tokens", key, anthropic=True, json=MESSAGES).status_code == 401
    assert face.srv.trajectory("a").counters["calls"] == 0


def test_the_key_is_the_session_with_or_without_its_prefix(face: ModelFace) -> None:
    srv = face.srv
    token = srv.open_session("a", SessionSpec(metadata={"task_id": "t-a"}))
    assert face.request("POST", "/v1/chat/completions", token, json=CHAT).status_code == 200
    assert face.request("POST", "/s/a/v1/chat/completions", token, json=CHAT).status_code == 200
    r = face.request("POST", "/s/a/v1/messages", token, anthropic=True, json=MESSAGES)
    assert r.status_code == 200 and r.json()["type"] == "message"
    assert face.request("GET", "/s/a/v1/models", token).json()["data"][0]["id"] == "lego-policy"
    assert srv.trajectory("a").counters["calls"] == 3


def test_a_key_cannot_reach_another_session(face: ModelFace) -> None:
    srv = face.srv
    token_a = srv.open_session("a")
    srv.open_session("b", SessionSpec(metadata={"task_id": "t-b"}))
    for path in ("/s/b/v1/chat/completions", "/s/default/v1/chat/completions", "/s/../b/v1/chat/completions"):
        r = face.request("POST", path, token_a, json=CHAT)
        assert r.status_code == 404, path
    r = face.request("POST", "/s/b/v1/messages", token_a, anthropic=True, json=MESSAGES)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert srv.trajectory("b").counters["calls"] == 0 and srv.trajectory("a").counters["calls"] == 0


def test_the_model_face_creates_no_session(face: ModelFace) -> None:
    srv = face.srv
    token = srv.open_session("a")
    before = set(srv.service.sessions)
    face.request("POST", "/s/fresh/v1/chat/completions", None, json=CHAT)
    face.request("POST", "/s/fresh/v1/chat/completions", token, json=CHAT)
    face.request("POST", "/v1/chat/completions", "lego-guess", json=CHAT)
    face.request("POST", "/s/fresh", token, json={})
    assert set(srv.service.sessions) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/s/a/trajectory"),
        ("GET", "/trajectory"),
        ("DELETE", "/s/a"),
        ("POST", "/s/a"),
        ("POST", "/s/b"),
        ("GET", "/healthz"),
        ("DELETE", "/s/a/v1/chat/completions"),
    ],
)
def test_control_routes_do_not_exist_on_the_model_face(face: ModelFace, method: str, path: str) -> None:
    srv = face.srv
    token = srv.open_session(
        "a", SessionSpec(sampling_override=SamplingOverride(temperature=0.7), max_turns=3, metadata={"task_id": "t-a"})
    )
    face.request("POST", "/s/a/v1/chat/completions", token, json=CHAT)
    r = face.request(method, path, token, json={"max_turns": 1000, "training": False})
    assert r.status_code in (404, 405)
    assert "segments" not in r.text and "t-a" not in r.text
    traj = srv.trajectory("a")  # untouched: the recorded turn and what the rollout set
    assert traj.counters["calls"] == 1 and traj.task_id == "t-a"
    s = srv.service.sessions["a"]
    assert s.spec == SessionSpec(
        sampling_override=SamplingOverride(temperature=0.7), max_turns=3, metadata={"task_id": "t-a"}
    )


def test_rollout_settings_hold_whatever_the_agent_sends(face: ModelFace) -> None:
    """Temperature override and turn limit come from open_session; requests cannot change them."""
    srv = face.srv
    token = srv.open_session(
        "a", SessionSpec(sampling_override=SamplingOverride(temperature=0.7), max_turns=2, metadata={"task_id": "t-a"})
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for _ in range(2):
        body = {"model": "m", "messages": messages, "temperature": 0.0, "top_p": 0.1, "metadata": {"max_turns": 99}}
        r = face.request("POST", "/s/a/v1/chat/completions", token, json=body)
        assert r.headers["x-lego-sampling-override"] == "temperature=0.7;top_p=1.0;top_k=0"
        messages += [r.json()["choices"][0]["message"], {"role": "user", "content": "go on"}]
    r = face.request("POST", "/s/a/v1/chat/completions", token, json={"model": "m", "messages": messages})
    assert r.status_code == 400 and r.json()["error"]["code"] == "max_turns"
    traj = srv.trajectory("a")
    assert traj.termination == "max_turns" and traj.task_id == "t-a" and traj.counters["calls"] == 2


def test_a_flood_on_new_threads_cannot_pass_the_sessions_generation_budget(
    scripted: tuple[ProxyServer, ScriptedEngine],
) -> None:
    """30 concurrent calls, each a new thread (so no main-thread turn limit applies): the engine
    starts no more generations than the session's budget, and the rollout is labelled for it."""
    srv, engine = scripted
    token = srv.open_session("a", SessionSpec(max_turns=30, max_generations=5))

    async def flood() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=srv.model_uds), timeout=60) as http:

            async def one(i: int) -> int:
                body = {"model": "m", "messages": [{"role": "user", "content": f"flood {i}"}]}
                r = await http.post(
                    "http://localhost/v1/chat/completions", json=body, headers={"authorization": f"Bearer {token}"}
                )
                return r.status_code

            return list(await asyncio.gather(*(one(i) for i in range(30))))

    codes = asyncio.run(flood())
    assert codes.count(200) == 5 and codes.count(400) == 25
    assert len(engine.prompts) == 5
    assert srv.trajectory("a").termination == "max_turns"


def test_sealing_or_closing_revokes_the_key_and_keeps_the_record(face: ModelFace) -> None:
    srv = face.srv
    token = srv.open_session("a")
    assert face.request("POST", "/v1/chat/completions", token, json=CHAT).status_code == 200
    srv.seal_session("a")
    assert face.request("POST", "/v1/chat/completions", token, json=CHAT).status_code == 401
    assert srv.trajectory("a").counters["calls"] == 1  # the episode's record is still the trainer's
    srv.close_session("a")
    assert face.request("POST", "/v1/chat/completions", token, json=CHAT).status_code == 401
    assert "a" not in srv.service.sessions


def test_reopening_a_session_revokes_its_old_key(face: ModelFace) -> None:
    srv = face.srv
    old = srv.open_session("a")
    new = srv.open_session("a")
    assert old != new
    assert face.request("POST", "/v1/chat/completions", old, json=CHAT).status_code == 401
    assert face.request("POST", "/v1/chat/completions", new, json=CHAT).status_code == 200


def test_a_generation_in_flight_when_the_session_is_sealed_is_not_recorded(
    scripted: tuple[ProxyServer, ScriptedEngine],
) -> None:
    """An agent process that outlives its harness keeps calling: nothing lands after the seal."""
    srv, engine = scripted
    face = ModelFace(srv, "tcp")
    token = srv.open_session("a")
    engine.delay = 1.0
    out: dict[str, int] = {}
    call = threading.Thread(
        target=lambda: out.update(status=face.request("POST", "/v1/chat/completions", token, json=CHAT).status_code)
    )
    call.start()
    threading.Event().wait(0.4)  # the request is in the engine now
    srv.seal_session("a")
    call.join(30)
    assert out["status"] == 401
    assert srv.trajectory("a").counters["calls"] == 0


def test_responses_continuation_is_scoped_to_its_own_session(face: ModelFace) -> None:
    """A response id from one session continues nothing in another (no reading its conversation)."""
    srv = face.srv
    token_a, token_b = srv.open_session("a"), srv.open_session("b")
    r = face.request("POST", "/v1/responses", token_a, json={"model": "m", "input": "the secret is 42"})
    assert r.status_code == 200
    rid = r.json()["id"]
    r = face.request(
        "POST", "/v1/responses", token_b, json={"model": "m", "input": "go on", "previous_response_id": rid}
    )
    assert r.status_code == 400 and "previous_response_id" in r.text
    r = face.request(
        "POST", "/v1/responses", token_a, json={"model": "m", "input": "go on", "previous_response_id": rid}
    )
    assert r.status_code == 200


class RecordingOracle(OracleEngine):
    """The real oracle engine, keeping the contexts it was called with (to check what reached it)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.contexts: list[RequestContext] = []

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        assert context is not None
        self.contexts.append(context)
        return await super().generate(prompt_ids, sampling, context, on_tokens)


def test_the_answer_reaches_the_oracle_and_nothing_the_agent_or_a_file_sees(
    tiny_engine: Any, chat_format: Any, tmp_path: Path
) -> None:
    oracle = RecordingOracle(chat_format, tiny_engine, score_context=32)
    with ProxyServer(oracle, chat_format, ProxyConfig(port=0)) as srv:  # type: ignore[arg-type]
        face = ModelFace(srv, "uds")
        token = srv.open_session("a", SessionSpec(metadata={"task_id": "t-a"}, answer=PATCH))
        r = face.request("POST", "/s/a/v1/chat/completions", token, json=CHAT)
        assert r.status_code == 200
        assert oracle.contexts[-1].answer == PATCH and "gold_patch" not in oracle.contexts[-1].session_metadata
        seen = [r.text]
        for path in ("/s/a/trajectory", "/trajectory", "/s/a", "/healthz", "/v1/models"):
            seen.append(face.request("GET", path, token).text)
        saved = srv.persist("a", tmp_path / "traj.json").read_text()
        exported = json.dumps(srv.trajectory("a").model_dump(mode="json"))
        control = httpx.get(f"{srv.root_url}/s/a/trajectory").text
    marker = base64.b64encode(PATCH.encode()).decode()[:40]
    for text in (*seen, saved, exported, control):
        assert "SECRET_FIX" not in text and marker not in text


def test_only_an_engine_that_takes_the_answer_gets_one(scripted: tuple[ProxyServer, ScriptedEngine]) -> None:
    srv, _ = scripted
    assert not srv.takes_answer
    with pytest.raises(ValueError, match="answer= only when the engine is the oracle"):
        srv.open_session("a", SessionSpec(answer=PATCH))
    with pytest.raises(ValueError, match=r"answer=task.patch"):
        srv.open_session("a", SessionSpec(metadata={"gold_patch": PATCH}))
    assert "a" not in srv.service.sessions


def test_control_face_opens_a_session_whose_token_works_on_the_model_face(tiny_engine: Any, chat_format: Any) -> None:
    """`lego proxy` users: open on the control face (API key), hand the harness the token and model face."""
    cfg = ProxyConfig(port=0, api_key="trainer-key", strict_sessions=True, default_max_tokens=4)
    with ProxyServer(tiny_engine, chat_format, cfg) as srv:
        face = ModelFace(srv, "tcp")
        url = f"{srv.root_url}/s/job-1"
        assert httpx.post(url, json={"max_turns": 5}).status_code == 401
        bad = httpx.post(url, json={"answer": PATCH}, headers={"authorization": "Bearer trainer-key"})
        assert bad.status_code == 400 and "oracle" in bad.text
        opened = httpx.post(url, json={"max_turns": 5}, headers={"authorization": "Bearer trainer-key"}).json()
        assert opened["session_id"] == "job-1"
        r = face.request("POST", "/s/job-1/v1/chat/completions", opened["token"], json=CHAT)
        assert r.status_code == 200
        # the trainer's key opens nothing on the model face, and the token opens nothing on the control face
        assert face.request("POST", "/v1/chat/completions", "trainer-key", json=CHAT).status_code == 401
        assert httpx.get(f"{url}/trajectory", headers={"authorization": f"Bearer {opened['token']}"}).status_code == 401
        traj = httpx.get(f"{url}/trajectory", headers={"authorization": "Bearer trainer-key"}).json()
        assert traj["counters"]["calls"] == 1


def test_many_sessions_at_once_each_record_only_their_own_calls(
    scripted: tuple[ProxyServer, ScriptedEngine],
) -> None:
    srv, _ = scripted
    face = ModelFace(srv, "uds")
    tokens = {f"s{i}": srv.open_session(f"s{i}") for i in range(16)}

    async def drive() -> None:
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=srv.model_uds), timeout=60) as http:

            async def one(sid: str, n: int) -> None:
                for _ in range(n):
                    r = await http.post(
                        f"http://localhost/s/{sid}/v1/chat/completions",
                        json=CHAT,
                        headers={"authorization": f"Bearer {tokens[sid]}"},
                    )
                    assert r.status_code == 200

            await asyncio.gather(*(one(sid, 1 + i % 3) for i, sid in enumerate(tokens)))

    asyncio.run(drive())
    for i, sid in enumerate(tokens):
        assert srv.trajectory(sid).counters["calls"] == 1 + i % 3
    face.http.close()
