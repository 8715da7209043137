"""The judges through the real path: sessions driven over the four APIs into a real `lego serve`,
real test-runner output in them, verdicts written to the store and read back; the model judge
over HTTP from a real proxy (the policy's chat template, scripted replies, then the tiny model sampling)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lego.conductor.cli.main import cli
from lego.config import ProxyConfig
from lego.engines.scripted import ScriptedEngine
from lego.learn.judge import RUBRIC, JudgeError, ModelJudge, RuleJudge, judge_store, parse_score
from lego.learn.signals import session_signals
from lego.learn.store import SqliteStore
from lego.proxies.server import ProxyServer
from tests.learn.helpers import ChatDriver, RealRuns, call, real_runs, red_to_green_session

OPENAI_KEY = "sk-proj-Xq3vT9bL2mN7pR4sW8yZ1aC5dE6fG0hJ2kL4mN6pQ8rS0tU2vW4xY6zA8bC0dE2fG4hJ6kL8"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RealRuns:
    return real_runs(tmp_path_factory.mktemp("calc"))


@pytest.fixture()
def judge_server(tiny_engine: Any, chat_format: Any) -> Any:
    """A model judge: the proxy's OpenAI face on a loopback port, its engine scripted."""
    engine = ScriptedEngine(tiny_engine, chat_format)
    with ProxyServer(engine, chat_format, ProxyConfig(port=0, default_max_tokens=128)) as server:
        yield server, engine


def still_red_session(served: Any, runs: RealRuns) -> str:
    """The agent runs the tests (red), 'fixes' the wrong thing (still red), the person says so, the session ends."""
    server, engine, client = served
    opened = client.new_session(private=False, label="still red")
    driver = ChatDriver(server, opened.key, "fix add() in calc.py")
    engine.push(call("pytest -q"), call("sed -i s/a \\/ b/a \\/\\/ b/ calc.py && pytest -q"))
    engine.push("Fixed it.<|im_end|>", "Sorry, looking again.<|im_end|>")
    driver.send()
    driver.result(runs.red)
    driver.send()
    driver.result(runs.red)
    driver.send()
    driver.say("no, the test still fails")
    driver.send()
    assert client.end_session(opened.row.id)
    return opened.row.id


@pytest.mark.parametrize("api", ["chat", "messages", "responses", "gemini"])
def test_the_rules_score_each_turn_from_what_followed_it(served: Any, runs: RealRuns, api: str) -> None:
    sid = red_to_green_session(served, api, runs)
    store = SqliteStore(served[0].dir / "learn.db")
    report = judge_store(store, RuleJudge())
    assert (report.scored, report.no_signal, report.pending, report.sessions) == (4, 0, 0, 1)
    got = [(v.turn, v.status, v.score, v.rules) for v in store.verdicts(session_id=sid, judge="rules")]
    assert got == [
        # The first run is red: finding the failure is no fault of its own; the attempt it began was thanked.
        (0, "scored", 0.5, ("attempt_thanks",)),
        (1, "scored", 1.0, ("tests_fixed",)),  # red -> green
        (2, "scored", 0.5, ("user_thanks",)),  # "thanks, that works"
        (3, "scored", 1.0, ("session_tests_green",)),  # the session ended green
    ]
    fixed = store.verdicts(session_id=sid)[1]
    assert fixed.inputs["next_state"]["tests_before"]["failed"] == 1  # what the judge saw is kept
    assert fixed.inputs["next_state"]["tool_results"][0]["test_run"]["passed"] == 2
    (turn1,) = [t for t in store.iter_turns(session_id=sid) if t.index == 1]
    assert [v.judge for v in turn1.verdicts] == ["rules"]  # and read back beside its turn
    store.close()


def test_a_wrong_fix_and_the_person_s_requery_score_below_zero(served: Any, runs: RealRuns) -> None:
    sid = still_red_session(served, runs)
    store = SqliteStore(served[0].dir / "learn.db")
    judge_store(store, RuleJudge())
    got = [(v.turn, v.score, v.rules) for v in store.verdicts(session_id=sid)]
    assert got == [
        (0, -0.5, ("attempt_requery",)),  # its own state is silent (a first red run): the attempt was re-queried
        (1, -0.5, ("tests_still_red",)),
        (2, -0.5, ("user_requery",)),  # "no, the test still fails": a re-query, not thanks
        (3, -1.0, ("session_tests_red",)),
    ]
    store.close()


def test_feedback_overrides_the_rules_and_a_rerun_judges_only_what_is_new(served: Any, runs: RealRuns) -> None:
    server, _, client = served
    sid = red_to_green_session(served, "chat", runs, end=False)
    store = SqliteStore(server.dir / "learn.db")
    first = judge_store(store, RuleJudge())
    assert (first.scored + first.no_signal, first.pending) == (3, 1)  # the open session's last turn waits
    assert (judge_store(store, RuleJudge()).written, judge_store(store, RuleJudge()).already) == (0, 3)
    client.feedback(sid, -1, turn=1, text="it edited the test, not the code")  # after its verdict
    again = judge_store(store, RuleJudge())
    assert (again.written, again.already, again.pending) == (1, 2, 1)  # turn 1 again: its next state changed
    assert client.end_session(sid)
    after_end = judge_store(store, RuleJudge())
    assert (after_end.written, after_end.already) == (1, 3)
    rejudged = judge_store(store, RuleJudge(), again=True, session_ids=[sid])
    assert rejudged.written == 4
    turn1 = [v for v in store.verdicts(session_id=sid) if v.turn == 1]
    assert [(v.score, v.rules) for v in turn1] == [(1.0, ("tests_fixed",)), *[(-1.0, ("feedback",))] * 2]
    with pytest.raises(KeyError, match="no recorded session 'nope'"):
        judge_store(store, RuleJudge(), session_ids=["nope"])
    store.close()


def test_a_private_session_has_nothing_to_judge(served: Any, runs: RealRuns) -> None:
    server, engine, client = served
    opened = client.new_session(private=True)
    driver = ChatDriver(server, opened.key, "fix add()")
    engine.push(call("pytest -q"), "done<|im_end|>")
    driver.send()
    driver.result(runs.red)
    driver.send()
    client.end_session(opened.row.id)
    store = SqliteStore(server.dir / "learn.db")
    report = judge_store(store, RuleJudge())
    assert (report.sessions, report.written) == (0, 0)
    with pytest.raises(KeyError):
        judge_store(store, RuleJudge(), session_ids=[opened.row.id])
    assert store.verdicts() == []
    store.close()


def test_the_score_parser_reads_the_last_score_and_nothing_else() -> None:
    assert parse_score("Tests went green.\nScore: 1") == 1
    assert parse_score("Score: 1 at first, but on reflection\nScore: -1") == -1
    assert parse_score("score = +1") == 1
    assert parse_score("\\boxed{0}") == 0
    assert parse_score("Score: 5") is None
    assert parse_score("the score is unclear") is None


def test_the_model_judge_asks_over_http_and_keeps_prompt_reply_and_votes(
    served: Any, runs: RealRuns, judge_server: Any
) -> None:
    server = served[0]
    sid = red_to_green_session(served, "chat", runs)
    proxy, engine = judge_server
    engine.push("Nothing changed yet.\nScore: 0<|im_end|>", "The failing test now passes.\nScore: 1<|im_end|>")
    engine.push("Unclear from this.<|im_end|>")  # no score: unparseable, never 0
    engine.push(f"Fine. The key {OPENAI_KEY} was in the log.\nScore: 1<|im_end|>")
    store = SqliteStore(server.dir / "learn.db")
    judge = ModelJudge(proxy.base_url, "judge")
    report = judge_store(store, judge)
    assert (report.judge, report.scored, report.unparseable) == ("model:judge", 3, 1)
    verdicts = store.verdicts(session_id=sid, judge="model:judge")
    assert [(v.turn, v.status, v.score) for v in verdicts] == [
        (0, "scored", 0.0),
        (1, "scored", 1.0),
        (2, "unparseable", None),
        (3, "scored", 1.0),
    ]
    system, user = verdicts[1].inputs["messages"]
    assert system["content"] == RUBRIC
    assert "THE AGENT'S REPLY:\n[tool call] bash(" in user["content"] and "1 failed" in user["content"]
    assert verdicts[1].raw == "The failing test now passes.\nScore: 1"
    assert OPENAI_KEY not in verdicts[3].raw and "[REDACTED" in verdicts[3].raw  # a judge's new text is redacted

    engine.push("Score: 1<|im_end|>", "Score: -1<|im_end|>")
    voted = ModelJudge(proxy.base_url, "voter", votes=2, temperature=0.6)
    (one,) = [s for s in session_signals(list(store.iter_turns(session_id=sid)), ended=True) if s.turn == 1]
    (turn1,) = [t for t in store.iter_turns(session_id=sid) if t.index == 1]
    v = voted.judge(turn1, one)
    assert (v.score, v.inputs["scores"], v.inputs["votes"]) == (0.0, [1, -1], 2)
    store.close()


def test_a_judge_that_cannot_be_reached_writes_nothing(served: Any, runs: RealRuns) -> None:
    server = served[0]
    red_to_green_session(served, "chat", runs)
    store = SqliteStore(server.dir / "learn.db")
    with pytest.raises(JudgeError, match="did not answer"):
        judge_store(store, ModelJudge("http://127.0.0.1:9/v1", "gone"))
    assert store.verdicts() == []
    store.close()


def test_the_cli_judges_with_the_policy_itself_and_shows_each_verdict(
    served: Any, runs: RealRuns, tiny_model_dir: Path
) -> None:
    server = served[0]
    sid = red_to_green_session(served, "gemini", runs)
    d = ["--dir", str(server.dir)]
    res = CliRunner().invoke(cli, ["serve", *d, "judge"])
    assert res.exit_code == 0, res.output
    assert "judge rules: 4 verdicts on 1 sessions (4 scored, 0 no signal, 0 unparseable)" in res.output
    # The policy itself (the tiny model, sampling): whatever it says is kept, a reply without a score as such.
    policy = ["-o", f"engine.model={tiny_model_dir}", "-o", "engine.device=cpu", "-o", "serve.judge_max_tokens=16"]
    res = CliRunner().invoke(cli, ["serve", *d, *policy, "judge", "--judge", "model", "--session", sid])
    assert res.exit_code == 0, res.output
    assert "judging with the policy" in res.output and "judge model:policy: 4 verdicts" in res.output
    store = SqliteStore(server.dir / "learn.db")
    model_verdicts = store.verdicts(judge="model:policy")
    store.close()
    assert len(model_verdicts) == 4 and all(v.raw for v in model_verdicts)
    assert all((v.status == "scored") == (parse_score(v.raw) is not None) for v in model_verdicts)

    res = CliRunner().invoke(cli, ["serve", *d, "turns", sid])
    assert res.exit_code == 0, res.output
    assert "turn 1  main  gemini" in res.output and "result: exit 0, 2 passed" in res.output
    assert "rules: scored +1.00  (tests_fixed)" in res.output
    assert "person: 'thanks, that works'" in res.output and "end: " in res.output
    res = CliRunner().invoke(cli, ["serve", *d, "turns", sid, "--json"])
    lines = [json.loads(line) for line in res.output.splitlines()]
    assert [len(x["verdicts"]) for x in lines] == [2, 2, 2, 2]
    assert lines[1]["next_state"]["tests_before"]["failed"] == 1


def test_bad_judge_settings_are_refused_before_anything_runs(served: Any) -> None:
    d = ["--dir", str(served[0].dir)]
    res = CliRunner().invoke(cli, ["serve", *d, "judge", "--judge", "model", "--url", "http://203.0.113.7/v1"])
    assert res.exit_code == 2 and "serve.judge_url" in res.output and "judge_allow_remote" in res.output
    res = CliRunner().invoke(cli, ["serve", *d, "judge", "--votes", "3"])
    assert res.exit_code == 2 and "serve.judge_temperature > 0" in res.output
    res = CliRunner().invoke(cli, ["serve", *d, "judge", "--session", "nope"])
    assert res.exit_code == 1 and "no recorded session 'nope'" in res.output
