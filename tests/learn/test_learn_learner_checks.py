"""The learner of `lego serve --learn` with a baseline and a held-out check, through the real path:
sessions over the official SDK into a real server, the rules judge, lego's trainer on the tiny model,
the weights copied into the serving engine; the held-out check scripted through its seam, and once
through lego's own eval path (a sandbox, lego-agent, the hidden tests' grade)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from lego.conductor.serve_heldout import HeldoutCheck, HeldoutDrop
from lego.conductor.serve_learner import ServeLearner
from lego.config import load_config
from lego.engines.scripted import ScriptedEngine
from lego.errors import ConfigError
from lego.learn.judge import RuleJudge
from lego.learn.server import ControlClient, LearnServer
from lego.training.trainer import Trainer
from tests.learn.test_learn_learner import IntoScripted, ask


class Rig:
    """A served tiny policy (scripted replies, real logprobs) and learners over one serve directory."""

    def __init__(self, tiny_model_dir: Path, chat_format: Any, directory: Path, *overrides: str) -> None:
        from lego.engines.transformers_engine import TransformersEngine

        self.real = TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=4, seed=0)
        self.scripted = ScriptedEngine(self.real, chat_format)
        self.chat = chat_format
        self.cfg = load_config(
            None,
            [
                f"engine.model={tiny_model_dir}",
                "engine.device=cpu",
                f"serve.dir={directory}",
                "serve.port=0",
                "serve.learn=true",
                "serve.learn_batch=2",
                "training.lr=1e-3",
                *overrides,
            ],
        )

    def make(self, heldout: Callable[[Path], HeldoutCheck] | None = None) -> tuple[LearnServer, ServeLearner]:
        server = LearnServer(self.scripted, self.chat, self.cfg.proxy, self.cfg.serve)
        self.server = server
        check = heldout(server.dir / "learner") if heldout is not None else None
        learner = ServeLearner(
            self.cfg, server, self.scripted, Trainer.from_config(self.cfg), IntoScripted(self.real, self.scripted),
            RuleJudge(), chat_format=self.chat, heldout=check,
        )  # fmt: skip
        return server, learner

    def scored_session(self, server: LearnServer, scores: list[int]) -> str:
        """A session of ``len(scores)`` turns, each given that feedback, then ended: all judged."""
        control = ControlClient.connect(server.dir)
        try:
            opened = control.new_session(private=False)
            self.scripted.push(*[f"Reply {i}.<|im_end|>" for i in range(len(scores))])
            for i in range(len(scores)):
                ask(server, opened.key, f"question {i}")
            for turn, score in enumerate(scores):
                control.feedback(opened.row.id, score, turn=turn)
            control.end_session(opened.row.id)
        finally:
            control.close()
        return opened.row.id

    def served_logprobs(self) -> list[float]:
        """What the serving engine's weights make of one fixed sequence (equal weights, equal numbers)."""
        ids = self.chat.encode("The bound check is off by one.<|im_end|>")
        (lps,) = asyncio.run(self.real.score([ids], [3], 1.0))
        return list(lps)


@pytest.fixture()
def rig(request: pytest.FixtureRequest, tiny_model_dir: Path, chat_format: Any, tmp_path: Path) -> Rig:
    overrides = getattr(request, "param", ())
    return Rig(tiny_model_dir, chat_format, tmp_path / "serve", *overrides)


def _metrics(learner: ServeLearner) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (learner.dir / "metrics.jsonl").read_text().splitlines()]


def _advantages(server: LearnServer) -> dict[tuple[str, int], float]:
    """What each trained turn's advantage was, as the store recorded it (read after the server stopped)."""
    from lego.learn.store import SqliteStore

    store = SqliteStore(server.dir / "learn.db")
    try:
        rows = store._db.execute("SELECT session_id, turn, advantage FROM learned WHERE outcome = 'trained'")
        return {(r[0], r[1]): r[2] for r in rows.fetchall()}
    finally:
        store.close()


# ---- the baseline ---------------------------------------------------------------------------------


def test_the_batch_baseline_turns_a_failing_step_into_no_push_at_all(rig: Rig) -> None:
    """Two failing turns, no baseline: -1 each pushes down every sampled token. Centred on their own mean
    they carry nothing, and a step of nothing is no step (AdamW would move the weights by momentum and
    weight decay): the served weights stay as they were and the turns wait, unconsumed."""
    assert rig.cfg.serve.learn_baseline == "batch"  # the default
    server, learner = rig.make()
    learner.resume()
    served = rig.served_logprobs()
    server.start()
    try:
        rig.scored_session(server, [-1, -1])
        assert learner.step() is None
    finally:
        server.stop()
    assert (learner.flat_passes, learner.trainer.step_count, learner.version) == (1, 0, 0)
    assert _advantages(server) == {}  # no token of the two failing turns was pushed down
    assert rig.served_logprobs() == served  # the served weights are the start's, exactly


@pytest.mark.parametrize("rig", [("serve.learn_baseline=running", "serve.learn_baseline_rate=0.5")], indirect=True)
def test_the_running_baseline_lives_in_the_checkpoint_a_restart_resumes_it_and_rollback_restores_it(rig: Rig) -> None:
    server, learner = rig.make()
    learner.resume()
    server.start()
    try:
        first = rig.scored_session(server, [1, -1])
        one = learner.step()  # no past: centred on its own mean (0.0), which starts the average
        second = rig.scored_session(server, [1, 1])
        two = learner.step()  # centred on the past: 0.0; then 0.0 + 0.5 x (1.0 - 0.0)
    finally:
        server.stop()
    assert one is not None and (one["learner/baseline"], one["learner/advantage_mean"]) == (0.0, 0.0)
    assert two is not None and (two["learner/score_mean"], two["learner/baseline"]) == (1.0, 0.0)
    assert (learner.baseline.value, learner.baseline.steps) == (0.5, 2)
    assert _advantages(server) == {(first, 0): 1.0, (first, 1): -1.0, (second, 0): 1.0, (second, 1): 1.0}
    saved = json.loads((learner.dir / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert saved["extra"]["baseline"] == {"mode": "running", "value": 0.5, "steps": 2}

    # A restart (the process gone, a new learner on the same directory) resumes step 2's baseline exactly ...
    server, learner = rig.make()
    assert learner.resume() == 2 and (learner.baseline.value, learner.baseline.steps) == (0.5, 2)
    server.start()
    try:
        third = rig.scored_session(server, [1, -1])
        three = learner.step()
    finally:
        server.stop()
    assert three is not None and three["learner/baseline"] == 0.5  # ... and the next step subtracts it
    assert {k: v for k, v in _advantages(server).items() if k[0] == third} == {(third, 0): 0.5, (third, 1): -1.5}
    assert (learner.baseline.value, learner.baseline.steps) == (0.25, 3)

    # --rollback N restores step N's baseline; --rollback 0 the start's (none yet)
    server, learner = rig.make()
    assert learner.resume(rollback=1) == 1 and (learner.baseline.value, learner.baseline.steps) == (0.0, 1)
    server.store.close()
    server, learner = rig.make()
    assert learner.resume(rollback=0) == 0 and (learner.baseline.value, learner.baseline.steps) == (None, 0)
    server.store.close()


@pytest.mark.parametrize("rig", [("serve.learn_baseline=situation", "serve.learn_batch=4")], indirect=True)
def test_the_situation_baseline_pushes_nothing_down_where_every_recent_turn_failed(rig: Rig) -> None:
    """Through the real server: first asks (one user message) scored +1, -1, -1 and turns after a re-query
    (two user messages) scored -1, -1. The thanked first ask is centred on the other first asks, and the
    re-queried turns, where nothing recent succeeded, carry no advantage."""
    server, learner = rig.make()
    learner.resume()
    server.start()
    control = ControlClient.connect(server.dir)
    try:
        first = rig.scored_session(server, [1, -1, -1])
        opened = control.new_session(private=False)
        client = openai.OpenAI(base_url=f"{server.model_url}/v1", api_key=opened.key, max_retries=0)
        rig.scripted.push("Done.<|im_end|>", "Done again.<|im_end|>")
        talk = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "Done."},
                {"role": "user", "content": "It still fails."}]  # fmt: skip
        client.chat.completions.create(model="m", messages=talk)  # type: ignore[arg-type]
        again = [{"role": "user", "content": "fix that"}, {"role": "assistant", "content": "Done."},
                 {"role": "user", "content": "Still failing."}]  # fmt: skip
        client.chat.completions.create(model="m", messages=again)  # type: ignore[arg-type]
        for turn in (0, 1):
            control.feedback(opened.row.id, -1, turn=turn)
        assert control.end_session(opened.row.id)
        line = learner.step()
    finally:
        control.close()
        server.stop()
    assert line is not None and line["learner/turns"] == 4
    adv = _advantages(server)
    # The balanced pick: the thanked turn, then the failed ones oldest first (one version: store order).
    assert set(adv) == {(first, 0), (first, 1), (first, 2), (opened.row.id, 0)}
    assert adv[(first, 0)] == pytest.approx(2.0)  # +1 against the other first asks' -1, -1
    assert adv[(first, 1)] == pytest.approx(-1.0) and adv[(first, 2)] == pytest.approx(-1.0)  # vs +1, -1
    assert adv[(opened.row.id, 0)] == 0.0  # after a re-query every recent turn failed: nothing pushed down


FRESHEST_RUNNING = ("serve.learn_baseline=running", "serve.learn_baseline_rate=1.0", "serve.learn_pick=freshest")


@pytest.mark.parametrize("rig", [FRESHEST_RUNNING], indirect=True)
def test_a_running_baseline_takes_a_turn_that_gives_the_batch_a_signal_and_starts_only_with_a_step(rig: Rig) -> None:
    """Agreeing scores with no past carry nothing (centred on their own mean): no step, and the average
    does not start. Under ``serve.learn_pick=freshest`` a turn that scored otherwise joins the batch in the
    least fresh one's place; later, scores that all equal the average carry nothing either, and an older
    turn that differs joins. (Rate 1: the average is the last step's mean, so a person's +-1 can equal it.)"""
    server, learner = rig.make()
    learner.resume()
    server.start()
    try:
        first = rig.scored_session(server, [1, 1])
        assert learner.step() is None
        assert (learner.flat_passes, learner.baseline.value, learner.baseline.steps) == (1, None, 0)
        second = rig.scored_session(server, [-1, -1])
        one = learner.step()  # first's two are the batch, flat; second's turn 0 takes the least fresh's place
        assert one is not None and (one["learner/score_mean"], one["learner/baseline"]) == (0.0, 0.0)
        third = rig.scored_session(server, [1, 1])  # step 1's weights sampled these: against the average 0.0
        two = learner.step()
        assert two is not None and (two["learner/baseline"], learner.baseline.value) == (0.0, 1.0)
        fourth = rig.scored_session(server, [1, 1])  # both equal the average (1.0): nothing, unless a turn differs
        three = learner.step()
    finally:
        server.stop()
    assert three is not None and three["learner/baseline"] == 1.0 and learner.flat_passes == 1
    assert _advantages(server) == {
        (first, 0): 1.0, (second, 0): -1.0,  # step 1
        (third, 0): 1.0, (third, 1): 1.0,  # step 2
        (fourth, 0): 0.0, (second, 1): -2.0,  # step 3: fourth's turn 1 gave way to the freshest ready turn that differs
    }  # fmt: skip
    assert (learner.baseline.value, learner.baseline.steps) == (0.0, 3)


def test_turns_sampled_by_weights_killed_before_their_checkpoint_never_train(rig: Rig) -> None:
    server, learner = rig.make()
    learner.resume()
    server.start()
    try:
        rig.scored_session(server, [1, -1])
        assert learner.step() is not None  # step 1, checkpointed
        learner.weights.push(learner.trainer)  # the next weights served, then the process dies: no checkpoint
        lost = rig.scored_session(server, [1, 1])
        assert {t.policy_version for t in server.store.iter_turns(session_id=lost)} == {2}
    finally:
        server.stop()
    server, learner = rig.make()
    try:
        assert learner.resume() == 1
        marks = server.store.learned()
    finally:
        server.store.close()
    # step 1's weights are served again under number 1 and the next step will be 2: these are not its turns
    assert marks[(lost, 0)] == marks[(lost, 1)] == (1, "rolled_back")


# ---- the held-out check, scripted through its seam -------------------------------------------------


class ScriptedScores:
    """A :data:`~lego.conductor.serve_heldout.Scorer`: pass@1 by eval directory; each call's directory and
    the learner step whose weights the engine served then."""

    def __init__(self, rig: Rig, scores: dict[str, float]) -> None:
        self.rig, self.scores = rig, scores
        self.calls: list[tuple[str, int]] = []

    def __call__(self, out_dir: Path) -> float:
        served = self.rig.server.recorder.version_base + self.rig.scripted.policy_version  # as the store counts
        self.calls.append((out_dir.name, served))
        return self.scores[out_dir.name]

    def check(self, directory: Path) -> HeldoutCheck:
        return HeldoutCheck(directory, {"source": "scripted"}, self, every=1, tolerance=0.1)


def test_a_held_out_drop_rolls_back_to_the_best_step_and_stops_the_learner(rig: Rig) -> None:
    scorer = ScriptedScores(rig, {"reference": 0.5, "step_000001": 0.6, "step_000002": 0.3})
    server, learner = rig.make(scorer.check)
    learner.resume()
    server.start()
    try:
        rig.scored_session(server, [1, -1])
        line = learner.step()  # the start's score first (the starting weights), then step 1, then its score
        assert line is not None and line["step"] == 1
        assert scorer.calls == [("reference", 0), ("step_000001", 1)]
        late = rig.scored_session(server, [-1, 1])
        step1_logprobs = rig.served_logprobs()
        with pytest.raises(HeldoutDrop, match=r"0\.300 at step 2 is more than 0\.1 below the start's 0\.500"):
            learner.step()  # step 2 scores 0.3: rolled back to step 1 (0.6, the best)
        assert scorer.calls[-1] == ("step_000002", 2)
        assert learner.version == 1 and learner.trainer.step_count == 1
        assert rig.served_logprobs() == pytest.approx(step1_logprobs, abs=1e-6)  # step 1's weights served again
        assert not (learner.dir / "checkpoints" / "step_000002").exists()
        assert list((learner.dir / "rolled_back").glob("*/step_000002"))
        assert (late, 0) not in server.store.learned()  # step 2's turns (sampled by step 1) may train again
        state = json.loads((learner.dir / "heldout.json").read_text())
        assert state["reference"] == {"step": 0, "pass1": 0.5} and state["scores"] == {"1": 0.6}
        checks = [m for m in _metrics(learner) if "heldout/pass1" in m]
        assert [(m["heldout/step"], m["heldout/pass1"], m["heldout/reference"]) for m in checks] == [
            (0, 0.5, 0.5), (1, 0.6, 0.5), (2, 0.3, 0.5)
        ]  # fmt: skip
        control = ControlClient.connect(server.dir)
        again = control.new_session(private=False)
        ask(server, again.key, "still served?")  # serving goes on, with step 1's weights
        control.close()
        assert [t.policy_version for t in server.store.iter_turns(session_id=again.row.id)] == [1]
    finally:
        server.stop()

    # A restart neither measures the start again nor loses it: it learns again from step 1, and only the
    # new step 2 (other weights under the same number) is scored.
    rescorer = ScriptedScores(rig, {"step_000002": 0.55})
    server, learner = rig.make(rescorer.check)
    assert learner.resume() == 1
    assert learner.heldout is not None and learner.heldout.reference == (0, 0.5) and learner.heldout.scores == {1: 0.6}
    try:
        line = learner.step()  # step 2's turns, trainable again
    finally:
        server.store.close()
    assert line is not None and line["step"] == 2 and rescorer.calls == [("step_000002", 2)]
    assert learner.heldout.scores == {1: 0.6, 2: 0.55}  # 0.05 below the start: within the tolerance


def test_a_drop_below_a_start_never_beaten_restores_the_starting_weights_from_the_learner_thread(rig: Rig) -> None:
    scorer = ScriptedScores(rig, {"reference": 0.5, "step_000001": 0.2})
    server, learner = rig.make(scorer.check)
    learner.resume()
    start_logprobs = rig.served_logprobs()
    server.start()
    try:
        first = rig.scored_session(server, [1, -1])
        learner.start()
        deadline = time.monotonic() + 120
        while learner.error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert learner.error is not None and learner.error.startswith("HeldoutDrop: held-out pass@1 0.200 at step 1")
        assert "rolled back to step 0 (0.500)" in learner.error
        assert _metrics(learner)[-1]["learner/stopped"] == learner.error
        assert learner.version == 0 and learner.trainer.step_count == 0
        assert rig.served_logprobs() == pytest.approx(start_logprobs, abs=1e-6)  # the starting weights again
        assert not (learner.dir / "checkpoints" / "step_000001").exists()
        assert (first, 0) not in server.store.learned()  # sampled by the starting weights: trainable again
    finally:
        learner.stop()
        server.stop()


# ---- the held-out check through lego's eval path --------------------------------------------------

SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>'


def _edit(old: str, new: str) -> str:
    args = {"command": "str_replace", "path": "quarry/core.py", "old_str": old, "new_str": new}
    return f"<tool_call>\n{json.dumps({'name': 'str_replace_editor', 'arguments': args})}\n</tool_call><|im_end|>"


HELDOUT = (
    "serve.learn_heldout=boundary:heldout",  # its first task: `score_mix` uses > where >= is right
    "serve.learn_heldout_limit=1",
    "serve.learn_heldout_every=1",
    "eval.samples=1",
    "eval.concurrency=1",
    "harness.max_turns=4",
    "harness.options.lego-agent.max_tokens=256",
)


@pytest.mark.parametrize("rig", [HELDOUT], indirect=True)
def test_the_held_out_check_scores_the_served_weights_through_the_eval_path_and_its_hidden_tests(rig: Rig) -> None:
    """The production scorer: lego-agent in a sandbox of the held-out task, through a proxy of its own in
    front of the serving engine, graded by the hidden tests; a real drop (the right fix, then a wrong one)
    rolls back and stops."""
    server, learner = rig.make(lambda d: HeldoutCheck.from_config(rig.cfg, d, rig.scripted, rig.chat))
    learner.resume()
    server.start()
    try:
        sid = rig.scored_session(server, [1, -1])
        rig.scripted.push(
            _edit("if item > limit:", "if item >= limit:"), SUBMIT,  # the start's weights fix it ...
            _edit("if item > limit:", "if item < limit:"), SUBMIT,  # ... step 1's break it
        )  # fmt: skip
        with pytest.raises(
            HeldoutDrop, match=r"pass@1 0\.000 at step 1 .* start's 1\.000 \(step 0\): rolled back to step 0"
        ):
            learner.step()
        assert learner.version == 0 and rig.scripted.script == []
        # the held-out rollouts went through their own proxy: nothing of theirs is in the store
        assert {t.session_id for t in server.store.iter_turns()} == {sid}
    finally:
        learner.stop()
        server.stop()
    assert json.loads((learner.dir / "heldout.json").read_text())["reference"] == {"step": 0, "pass1": 1.0}
    (start,) = (learner.dir / "heldout" / "reference" / "samples").rglob("0.json")
    assert start.parent.name == "lego-boundary__heldout-0001" and json.loads(start.read_text())["passed"] is True
    (dropped,) = (learner.dir / "heldout" / "rolled_back").glob("*/step_000001/samples/*/*/*/0.json")
    assert json.loads(dropped.read_text())["passed"] is False


# ---- config refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [("serve.learn_heldout_limit=0", "serve.learn_heldout_limit"),
     ("serve.learn_heldout_every=0", "serve.learn_heldout_every"),
     ("serve.learn_heldout_tolerance=1.5", "serve.learn_heldout_tolerance")],
)  # fmt: skip
def test_held_out_settings_out_of_range_are_refused_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(
        ConfigError, match=f"{key}: Input should be greater than or equal to|{key}: Input should be less"
    ):
        load_config(None, [override])


def test_an_unknown_held_out_source_is_refused_naming_the_key_before_the_model_loads(tmp_path: Path) -> None:
    from lego.conductor.preflight import check_serve_learn
    from lego.conductor.serve_heldout import heldout_tasks

    cfg = load_config(None, ["serve.learn=true", "serve.learn_heldout=nosuch:heldout"])
    with pytest.raises(ConfigError, match=r"^serve\.learn_heldout: .*unknown task source 'nosuch:heldout'"):
        check_serve_learn(cfg)
    with pytest.raises(ConfigError, match=r"^serve\.learn_heldout: .*unknown task source 'nosuch:heldout'"):
        heldout_tasks(cfg)
    check_serve_learn(load_config(None, ["serve.learn=true", "serve.learn_heldout=boundary:heldout"]))  # loads
    # The CLI refuses before any compute: a model that is not there is never reached.
    proc = subprocess.run(
        [sys.executable, "-m", "lego", "serve", "--dir", str(tmp_path / "serve"), "--learn", "--port", "0",
         "-o", "engine.model=/nonexistent/model", "-o", "serve.learn_heldout=nosuch:heldout"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "serve.learn_heldout" in proc.stderr and "unknown task source" in proc.stderr
    assert "/nonexistent/model" not in proc.stderr and not (tmp_path / "serve" / "learner").exists()


def test_a_start_score_measured_with_other_settings_is_refused(tmp_path: Path) -> None:
    HeldoutCheck(tmp_path, {"samples": 2}, lambda _: 0.4, every=5, tolerance=0.1).measure(0)
    kept = HeldoutCheck(tmp_path, {"samples": 2}, lambda _: 0.0, every=5, tolerance=0.1)
    assert kept.reference == (0, 0.4) and not kept.pending(3) and kept.pending(5) and not kept.pending(0)
    with pytest.raises(ConfigError, match=r"serve\.learn_heldout: .*other settings \(samples: was 2, now 4\)"):
        HeldoutCheck(tmp_path, {"samples": 4}, lambda _: 0.0, every=5, tolerance=0.1)
