"""The simulated person through the real path: `lego serve`'s server, its control face, a bubblewrap
sandbox of a boundary-suite task, lego-agent's own process answered through its resume, the
person's visible-test runs, the store, the rules judge and the learner -- and never the grader."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from lego.conductor.serve_learner import ServeLearner
from lego.conductor.simulated_use import THANKS, SimulatedUser, UseDriver
from lego.config import load_config
from lego.engines.scripted import ScriptedEngine
from lego.learn.judge import RuleJudge, judge_store
from lego.learn.server import LearnServer
from lego.learn.signals import session_signals
from lego.tasks.sources import load_tasks
from lego.training.trainer import Trainer
from lego.training.weight_sync import InProcessCopy


def _edit(old: str, new: str) -> str:
    args = {"command": "str_replace", "path": "quarry/util.py", "old_str": old, "new_str": new}
    return f"<tool_call>\n{json.dumps({'name': 'str_replace_editor', 'arguments': args})}\n</tool_call><|im_end|>"


SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>'


@pytest.fixture()
def served(tiny_model_dir: Path, chat_format: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from lego.engines.transformers_engine import TransformersEngine

    def no_grader(*_: Any, **__: Any) -> Any:
        raise AssertionError("the simulated person's sessions must never reach the grader (hidden tests)")

    import lego.conductor.drive
    import lego.sandboxes.grading

    monkeypatch.setattr(lego.sandboxes.grading, "grade", no_grader)
    monkeypatch.setattr(lego.conductor.drive, "grade", no_grader)
    real = TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=4, seed=0)
    engine = ScriptedEngine(real, chat_format)
    cfg = load_config(
        None,
        [
            f"engine.model={tiny_model_dir}",
            "engine.device=cpu",
            f"serve.dir={tmp_path / 'serve'}",
            "serve.learn=true",
            "serve.learn_batch=4",
            "training.lr=1e-3",
            "harness.options.lego-agent.max_tokens=256",
        ],
    )
    server = LearnServer(engine, chat_format, cfg.proxy, cfg.serve)
    server.start()
    try:
        yield cfg, server, engine, real
    finally:
        server.stop()


def test_a_wrong_fix_is_requeried_the_right_one_thanked_and_every_step_of_each_attempt_shares_the_reply(
    served: Any,
) -> None:
    cfg, server, engine, real = served
    (task,) = load_tasks("boundary:train", limit=1)  # quarry: `tower_open` uses < where <= is right
    engine.push(
        _edit("return a < b", "return a > b"),  # attempt 1: the wrong fix ...
        SUBMIT,  # ... and "done"
        _edit("return a > b", "return a <= b"),  # attempt 2, after "it still fails": the right one
        SUBMIT,
        SUBMIT,  # the reply to the thanks
    )
    with UseDriver(cfg, server, rounds=2, max_turns=4, timeout_s=120) as drive:
        record = drive.session(task, "lego-agent")
    assert record.error == "" and record.green and record.attempts == 2, json.dumps(record.to_json())
    requery, thanks = record.replies
    assert requery.startswith("It still fails") and "test_tower_open" in requery and "assert" in requery
    assert thanks == THANKS

    store = server.store
    turns = list(store.iter_turns(session_id=record.session_id))
    assert len(turns) == 5 and store.session(record.session_id).ended_at is not None
    states = session_signals(turns, ended=True)
    assert [s.user_message is not None for s in states] == [False, True, False, True, False]
    assert states[0].episode_reply == requery and states[2].episode_reply == THANKS
    judge_store(store, RuleJudge())
    verdicts = {v.turn: v for v in store.verdicts(session_id=record.session_id, judge="rules")}
    assert {t: (v.score, v.rules) for t, v in verdicts.items() if v.score is not None} == {
        0: (-0.5, ("attempt_requery",)),
        1: (-0.5, ("user_requery",)),
        2: (0.5, ("attempt_thanks",)),
        3: (0.5, ("user_thanks",)),
    }
    assert verdicts[4].status == "no_signal"  # the agent's answer to the thanks: nothing followed it

    # The learner trains on those four, from the store alone.
    learner = ServeLearner(cfg, server, engine, Trainer.from_config(cfg), InProcessCopy(real), RuleJudge())
    learner.resume()
    line = learner.step()
    assert line is not None and line["learner/turns"] == 4 and line["learner/advantage_mean"] == 0.0
    assert line["training/rollout_actor_probs_pearson_corr"] > 0.999
    step1 = learner.dir / "checkpoints" / "step_000001"
    assert cfg.training.finetune != "lora" or (step1 / "config.json").is_file()  # `lego eval` takes it as a model


def test_the_person_reports_what_a_terminal_shows() -> None:
    user = SimulatedUser()
    out = (
        "F.                                                                       [100%]\n"
        "=================================== FAILURES ===================================\n"
        "E       assert False == True\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/test_util.py::test_tower_open - assert False == True\n"
        "1 failed, 1 passed in 0.03s\n"
    )
    from lego.learn.tool_output import parse_test_run

    run = parse_test_run(out)
    assert run is not None and run.red
    reply = user.reply(run, out)
    assert reply.startswith("It still fails") and "FAILED tests/test_util.py::test_tower_open" in reply
    assert "1 failed, 1 passed" in reply and "=====" not in reply.split("\n\n")[1]
    assert user.reply(parse_test_run("2 passed in 0.01s\n"), "2 passed in 0.01s\n") == THANKS
    assert user.reply(None, "ImportError: no module named quarry").startswith("It still fails")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--harness", "mini-swe-agent"], ["--harness", "mini-swe-agent", "reply"]),
        (["--harness", "nosuch"], ["--harness", "nosuch"]),
        (["--minutes", "0"], ["--minutes"]),
        (["--signal", "loud"], ["--signal", "loud"]),
    ],
)
def test_bench_use_refuses_bad_arguments_before_any_compute(args: list[str], names: list[str], tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "bench", "use", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert all(n in proc.stderr for n in names), proc.stderr
    assert not out.exists()  # nothing started


class WeightedScript(ScriptedEngine):
    """The scripted policy with the real engine's in-process weights behind it, as `build_engine` builds
    for engine.kind=transformers: what `lego bench use` serves and its learner pushes weights into."""

    def __init__(self, real: Any, chat_format: Any) -> None:
        from lego.seams import EngineCapabilities

        super().__init__(real, chat_format)
        self.capabilities = EngineCapabilities(in_process_weights=self)

    def load_weights(self, state_dict: Any) -> int:
        self.policy_version = self.real.load_weights(state_dict)
        return self.policy_version


def _alternate(spec: Any, tasks: Any, out_dir: Path, cfg: Any) -> Any:
    """The held-out sweeps' sample function (a SampleFnFactory): every other sample passes, no model."""
    from lego.eval.results import SampleResult

    def run_sample(key: Any) -> Any:
        assert key.task_id in tasks
        return SampleResult(key=key, passed=key.sample % 2 == 0, reward=float(key.sample % 2 == 0))

    return run_sample


def test_bench_use_runs_its_phases_on_a_scripted_policy_and_reports_what_the_learner_did(
    tiny_model_dir: Path, chat_format: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_use_bench` end to end: the start's sweep (a scripted sample function), one simulated session on
    a boundary training task with the learner on, a learner step, the step's checkpoint swept and compared;
    the report and its files hold what happened."""
    import lego.conductor.drive
    import lego.engines
    import lego.sandboxes.grading
    from lego.conductor.bench.use import run_use_bench
    from lego.conductor.simulated_use import UseDriver
    from lego.engines.transformers_engine import TransformersEngine

    def no_grader(*_: Any, **__: Any) -> Any:
        raise AssertionError("the simulated person's sessions must never reach the grader (hidden tests)")

    monkeypatch.setattr(lego.sandboxes.grading, "grade", no_grader)
    monkeypatch.setattr(lego.conductor.drive, "grade", no_grader)
    engine = WeightedScript(TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=4, seed=0), chat_format)
    engine.push(_edit("return a < b", "return a <= b"), SUBMIT, SUBMIT)  # the fix, "done", the answer to thanks
    monkeypatch.setattr(lego.engines, "build_engine", lambda _cfg: engine)
    out = tmp_path / "out"
    sessions = UseDriver.sessions

    def then_let_the_learner_train(self: UseDriver, *args: Any, **kwargs: Any) -> Any:
        # The bench stops the learner when the budget's sessions end; wait for the step their turns make,
        # so what the report says of it is fixed.
        done = sessions(self, *args, **kwargs)
        metrics = out / "serve" / "learner" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and '"step"' in metrics.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return done

    monkeypatch.setattr(UseDriver, "sessions", then_let_the_learner_train)
    report = run_use_bench(
        out, minutes=0.01, limit=2, seed=0, concurrency=1, rounds=0, factory=_alternate,
        overrides=(
            f"engine.model={tiny_model_dir}", "engine.device=cpu", "tasks.source=boundary", "tasks.limit=1",
            "serve.port=0", "serve.learn_batch=2", "serve.learn_poll_s=0.2", "training.lr=1e-3",
            "harness.max_turns=4", "harness.options.lego-agent.max_tokens=256", "eval.temperatures=[1.0]",
            "eval.sweep_samples=2", "eval.confirm_samples=0", "eval.pass_at_k=[1]", "eval.bootstrap=100",
        ),
    )  # fmt: skip
    assert json.loads((out / "use.json").read_text()) == json.loads(json.dumps(report))
    assert (report["sessions"], report["sessions_green"], report["sessions_failed_to_run"], report["turns"]) == (
        1,
        1,
        0,
        3,
    )
    (row,) = [json.loads(x) for x in (out / "sessions.jsonl").read_text().splitlines()]
    assert row["task"] == "lego-boundary__train-0001" and row["green"] and row["replies"] == [THANKS]
    # the agent's fix and its "done" were thanked (+0.5 each); its answer to the thanks had nothing after it
    # (every verdict written counts: a turn judged while the session ran is judged again once it settled)
    assert report["verdicts"]["scored"] == 2 and set(report["verdicts"]) == {"scored", "no_signal"}
    assert report["rules"] == {"attempt_thanks": 1, "user_thanks": 1}
    assert report["learned"] == {"trained": 2} and report["learner_error"] is None
    (step,) = report["per_step"]
    assert (step["step"], step["turns"], step["reward"], step["baseline"]) == (1, 2, 0.5, 0.5)
    assert step["pearson"] > 0.999 and report["checkpoint"].endswith("step_000001")
    # the held-out sweeps: 2 tasks x 2 samples per policy, every other one passing, before and after
    assert report["before_sweep"]["points"][0]["pass1_all_tasks"] == 0.5
    assert report["after_checkpoint"] == report["checkpoint"] and report["comparison"]["best_vs_best"]["delta"] == 0.0
    assert (out / "use.png").is_file() and report["heldout_checks"] == []
