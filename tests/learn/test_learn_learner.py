"""The learner of `lego serve --learn` through the real path: sessions over the official SDK into a
real server, the rules judge, lego's trainer on the tiny model, the weights copied into the serving
engine between requests, checkpoints, resume and rollback; then the CLI as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from lego.conductor.serve_learner import ServeLearner, opd_advantages
from lego.config import load_config
from lego.engines.scripted import ScriptedEngine
from lego.learn.judge import RuleJudge
from lego.learn.server import ControlClient, LearnServer
from lego.training.trainer import Trainer
from lego.training.weight_sync import InProcessCopy


class IntoScripted:
    """The in-process weight copy into the real engine behind a ScriptedEngine, whose replies then carry
    the version the real engine serves (the scripted double has no weights of its own)."""

    def __init__(self, real: Any, scripted: ScriptedEngine) -> None:
        self.copy, self.scripted = InProcessCopy(real), scripted

    def push(self, trainer: Trainer) -> int:
        self.scripted.policy_version = self.copy.push(trainer)
        return self.scripted.policy_version

    def close(self) -> None:
        return None


@pytest.fixture(params=["reward"])
def setup(request: pytest.FixtureRequest, tiny_model_dir: Path, chat_format: Any, tmp_path: Path) -> Any:
    from lego.engines.transformers_engine import TransformersEngine

    real = TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=4, seed=0)  # its own: weights change
    scripted = ScriptedEngine(real, chat_format)
    cfg = load_config(
        None,
        [
            f"engine.model={tiny_model_dir}",
            "engine.device=cpu",
            f"serve.dir={tmp_path / 'serve'}",
            "serve.port=0",
            "serve.learn=true",
            "serve.learn_batch=2",
            f"serve.learn_signal={request.param}",
            "training.lr=1e-3",
        ],
    )

    def make() -> tuple[LearnServer, ServeLearner]:
        server = LearnServer(scripted, chat_format, cfg.proxy, cfg.serve)
        trainer = Trainer.from_config(cfg)
        learner = ServeLearner(
            cfg, server, scripted, trainer, IntoScripted(real, scripted), RuleJudge(), chat_format=chat_format
        )
        return server, learner

    return cfg, scripted, make, real


@contextlib.contextmanager
def serving(make: Any) -> Iterator[tuple[LearnServer, ServeLearner, ControlClient, Any]]:
    """A started server and resumed learner from ``make``, a control client and one open session."""
    server, learner = make()
    learner.resume()
    server.start()
    control = ControlClient.connect(server.dir)
    try:
        yield server, learner, control, control.new_session(private=False)
    finally:
        control.close()
        learner.stop()
        server.stop()


def ask(server: LearnServer, key: str, text: str, temperature: float | None = None, **more: Any) -> None:
    client = openai.OpenAI(base_url=f"{server.model_url}/v1", api_key=key, max_retries=0)
    extra = ({} if temperature is None else {"temperature": temperature}) | more
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], **extra)  # type: ignore[call-overload]


def test_judged_turns_train_a_step_the_engine_serves_it_and_a_resume_or_rollback_is_exact(setup: Any) -> None:
    _, scripted, make, _ = setup
    server, learner = make()
    assert learner.resume() == 0
    server.start()
    control = ControlClient.connect(server.dir)
    try:
        opened = control.new_session(private=False)
        hidden = control.new_session(private=True)
        scripted.push(
            "Use >= there.<|im_end|>", "Use < there.<|im_end|>", "Try again.<|im_end|>", "Nucleus.<|im_end|>",
            "Mine.<|im_end|>",
        )  # fmt: skip
        ask(server, opened.key, "which comparison?")  # turn 0, temperature 1.0 (the trainer's)
        ask(server, opened.key, "and in the loop?")  # turn 1: the first one's thread is over, a new one
        ask(server, opened.key, "once more, colder", temperature=0.3)  # turn 2: another distribution
        ask(server, opened.key, "only the likely words", top_p=0.5)  # turn 3: a truncated draw
        ask(server, hidden.key, "private question")
        for turn, score in ((0, 1), (1, -1), (2, 1), (3, 1)):
            control.feedback(opened.row.id, score, turn=turn)
        # Turns 0 and 1 are followed by later requests (which do not hold them: their state is
        # "unmatched", settled), so their feedback judges them (turn 2 too, skipped: another temperature);
        # turn 3 is the session's last and waits.
        line = learner.step()
        assert line is not None and line["step"] == 1 and line["learner/turns"] == 2
        assert line["training/rollout_actor_probs_pearson_corr"] > 0.999  # the recorded logprobs are the trainer's
        assert line["learner/advantage_mean"] == 0.0  # +1 and -1
        assert control.end_session(opened.row.id)
        assert learner.step() is None  # turn 3 is judged now, and skipped for good: a truncated draw
        marks = server.store.learned()
        assert marks == {(opened.row.id, 0): (1, "trained"), (opened.row.id, 1): (1, "trained"),
                         (opened.row.id, 2): (0, "temperature"), (opened.row.id, 3): (1, "truncated")}  # fmt: skip
        assert all(sid != hidden.row.id for sid, _ in marks)
        assert (learner.dir / "checkpoints" / "step_000001").is_dir()

        later = control.new_session(private=False)
        ask(server, later.key, "after the step")  # served by the new weights, between requests
        (after,) = server.store.iter_turns(session_id=later.row.id)
        assert after.policy_version == 1 and after.tokens is not None and set(after.tokens.versions) == {1}
        assert learner.step() is None  # nothing new is scored
        assert [v.turn for v in server.store.verdicts(session_id=opened.row.id)] == [0, 1, 2, 3]
    finally:
        control.close()
        learner.stop()
        server.stop()

    # A learner killed after marking step 2's turns, before its checkpoint: the marks go, the turns train again.
    server, learner = make()
    server.store.mark_learned([(later.row.id, 0, 2, "trained", 1.0)])
    assert learner.resume() == 1 and (later.row.id, 0) not in server.store.learned()
    # The store's versions count learner steps whatever the engine counts (here it kept counting: one engine).
    assert server.recorder.version_base + scripted.policy_version == 1
    server.store.close()

    # Rolling back to the starting weights: step 1 set aside, what its weights sampled never trains.
    server, learner = make()
    assert learner.resume(rollback=0) == 0
    assert not (learner.dir / "checkpoints" / "step_000001").exists()
    assert list((learner.dir / "rolled_back").glob("*/step_000001"))
    marks = server.store.learned()
    assert marks[(later.row.id, 0)] == (0, "rolled_back")
    assert (opened.row.id, 0) not in marks  # step 1's marks are forgotten: its turns can train again
    with pytest.raises(Exception, match="no learner checkpoint of step 5"):
        learner.resume(rollback=5)
    server.store.close()


@pytest.mark.parametrize("setup", ["opd", "both"], indirect=True)
def test_hindsight_distillation_scores_the_recorded_tokens_under_the_hinted_context(setup: Any) -> None:
    cfg, scripted, make, _ = setup
    cfg.serve.learn_pick = "freshest"  # the two corrected turns, not the thanked one a balanced `both` step takes
    with serving(make) as (server, learner, control, opened):
        client = openai.OpenAI(base_url=f"{server.model_url}/v1", api_key=opened.key, max_retries=0)
        scripted.push("Use < in the loop.<|im_end|>", "Use <= then.<|im_end|>", "Right, >= then.<|im_end|>")
        scripted.push("Glad it works.<|im_end|>")
        talk: list[Any] = [{"role": "user", "content": "the bound check is off by one, fix it"}]
        for reply_to in ("no, the test still fails", "wrong, try again: use >= there", "thanks, that works"):
            r = client.chat.completions.create(model="m", messages=talk)
            talk += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": reply_to},
            ]
        client.chat.completions.create(model="m", messages=talk)
        control.end_session(opened.row.id)
        line = learner.step()
        marks = server.store.learned()
    assert line is not None and line["step"] == 1 and line["learner/turns"] == 2
    # The two corrected turns (the oldest) carry hints and train by distillation; "thanks" has none.
    assert line["learner/opd_turns"] == 2.0 and line["learner/opd_gap_abs_max"] > 0.0
    assert marks[(opened.row.id, 0)] == (1, "trained") and marks[(opened.row.id, 1)] == (1, "trained")
    if cfg.serve.learn_signal == "opd":
        assert marks[(opened.row.id, 2)] == (0, "no_hint")  # distillation alone: nothing to teach from it
    else:
        assert (opened.row.id, 2) not in marks  # scored +0.5: it waits for the next batch


def test_the_teacher_context_holds_the_hint_and_its_gap_is_the_engine_s(setup: Any, chat_format: Any) -> None:
    """The distillation advantage, checked against the serving engine scoring the same ids itself."""
    import asyncio

    from lego.learn.batches import LearnableTurn

    _, _, make, real = setup
    server, learner = make()
    messages = [{"role": "user", "content": "fix the bound"}]
    prompt = chat_format.render(messages, None, add_generation_prompt=True)
    output = chat_format.encode("Use < there.<|im_end|>")
    turn = LearnableTurn("s", 0, "main", True, prompt, output, [0.0] * len(output), [0] * len(output), -1.0, "rules",
                         messages=messages, hint="The user replied: no, use >=")  # fmt: skip
    teacher = learner.teacher_prompt(turn)
    assert "The user replied: no, use >=" in chat_format.decode(teacher) and teacher[: len(prompt) - 3] != prompt
    items, m = learner._distil([turn], [learner_item(turn)])
    (t_lp,) = asyncio.run(real.score([teacher + output], [len(teacher)], 1.0))
    (s_lp,) = asyncio.run(real.score([prompt + output], [len(prompt)], 1.0))
    gap = [t - s for t, s in zip(t_lp, s_lp, strict=True)]
    serve = learner.cfg.serve
    ((expected,), _) = opd_advantages([gap], serve.learn_opd_clip, serve.learn_opd_centre)  # clipped, centred
    got = items[0].token_advantages
    assert got is not None and len(got) == len(output)
    base = -1.0 if serve.learn_signal == "both" else 0.0
    assert max(abs(g - base - e) for g, e in zip(got, expected, strict=True)) < 1e-3
    assert m["learner/opd_turns"] == 1.0 and abs(m["learner/opd_gap_mean"] - sum(gap) / len(gap)) < 1e-3
    server.store.close()


def test_distillation_advantages_are_clipped_then_centred_on_the_step() -> None:
    """Under the student's own samples the gap log pi_teacher - log pi_student averages -KL <= 0: uncentred,
    every step pushes most sampled tokens down (measured: the tool-call format was lost in 19 steps, with
    single tokens at |gap| 12). Clipped to [-c, c], then the step's mean over all hinted tokens subtracted."""
    gaps = [[-12.0, -0.5, -0.1], [0.5, 3.0, -2.0]]
    shaped, centre = opd_advantages(gaps, 1.0, True)
    assert centre == (-1.0 - 0.5 - 0.1 + 0.5 + 1.0 - 1.0) / 6 < 0
    assert shaped == [[-1.0 - centre, -0.5 - centre, -0.1 - centre], [0.5 - centre, 1.0 - centre, -1.0 - centre]]
    assert abs(sum(sum(g) for g in shaped)) < 1e-12  # no step-wide push up or down
    # A token the hinted context favours more than the step's average goes up, even with a negative raw gap.
    assert shaped[0][1] < 0 < shaped[0][2]
    assert opd_advantages(gaps, None, False) == (gaps, 0.0)  # the raw gap, as measured before
    assert opd_advantages([], 1.0, True) == ([], 0.0)


def test_a_batch_whose_scores_all_agree_is_no_step_and_waits_for_a_turn_that_scored_otherwise(setup: Any) -> None:
    """Under the batch baseline, agreeing scores give every token advantage 0; stepping AdamW anyway
    replays its momentum into the weights (measured in `lego bench use`). So no step, nothing consumed,
    and the next turn that scores otherwise makes the batch a step."""
    _, scripted, make, _ = setup
    with serving(make) as (server, learner, control, opened):
        scripted.push("One.<|im_end|>", "Two.<|im_end|>", "Three.<|im_end|>")
        for text in ("first", "second", "third"):
            ask(server, opened.key, text)
        control.feedback(opened.row.id, -1, turn=0)
        control.feedback(opened.row.id, -1, turn=1)  # turns 0 and 1 settle (later requests); turn 2 waits
        before = {k: v.detach().clone() for k, v in learner.trainer.model.named_parameters() if v.requires_grad}
        assert learner.step() is None and learner.step() is None
        assert learner.flat_passes == 2 and learner.trainer.step_count == 0 and learner.version == 0
        after = dict(learner.trainer.model.named_parameters())
        assert all(torch.equal(before[k], after[k]) for k in before)  # not a weight moved
        assert server.store.learned() == {}  # nothing consumed: the turns wait
        assert not (learner.dir / "checkpoints").exists() or not list((learner.dir / "checkpoints").glob("step_*"))

        control.feedback(opened.row.id, +1, turn=2)
        assert control.end_session(opened.row.id)  # turn 2 settles, scored otherwise: it joins the batch
        line = learner.step()
        assert line is not None and line["step"] == 1 and line["learner/flat_passes"] == 2
        trained = {turn for (_, turn), (_, why) in server.store.learned().items() if why == "trained"}
        assert 2 in trained and len(trained) == 2
        assert line["learner/advantage_mean"] == 0.0 and line["actor/grad_norm"] > 0.0


def test_a_thanked_attempt_trains_in_one_step_before_its_turns_go_stale(setup: Any) -> None:
    """Thanked turns are scarce and come in a clump (every turn of the attempt the person thanked). Taking
    the freshest turns plus one that scored otherwise trained one of them a step; the rest went stale
    (measured: 36 of 70 in a 30-minute `lego bench use`). The step now spreads over the scores."""
    cfg, scripted, make, _ = setup
    cfg.serve.learn_batch, cfg.serve.learn_max_staleness = 4, 0  # a turn is stale once any step trained
    with serving(make) as (server, learner, control, opened):
        scripted.push(*(f"Reply {n}.<|im_end|>" for n in range(6)))
        for n in range(6):
            ask(server, opened.key, f"ask {n}")
        for n, score in enumerate((-1, -1, -1, -1, +1, +1)):
            control.feedback(opened.row.id, score, turn=n)
        assert control.end_session(opened.row.id)
        line = learner.step()
        assert line is not None and line["step"] == 1 and line["learner/turns"] == 4
        marks = server.store.learned()
        trained = {turn for (_, turn), (_, why) in marks.items() if why == "trained"}
        assert {4, 5} <= trained and len(trained) == 4  # both thanked turns, two of the four pushed down
        assert line["learner/advantage_mean"] == 0.0 and line["actor/grad_norm"] > 0.0
        assert learner.step() is None  # what is left was sampled before step 1: stale at staleness 0
        assert sorted(why for why in (m[1] for m in server.store.learned().values())) == ["stale"] * 2 + ["trained"] * 4


def test_a_failing_pass_stops_the_learner_with_its_reason_and_serving_goes_on(setup: Any) -> None:
    from lego.learn.judge import ModelJudge

    make = setup[2]
    server, learner = make()
    learner.judge = ModelJudge("http://127.0.0.1:9/v1", "gone")  # nothing listens there
    learner.resume()
    server.start()
    control = ControlClient.connect(server.dir)
    try:
        opened = control.new_session(private=False)
        ask(server, opened.key, "a question")
        control.end_session(opened.row.id)
        learner.start()
        deadline = time.monotonic() + 60
        while learner.error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert learner.error is not None and "JudgeError" in learner.error and "did not answer" in learner.error
        lines = [json.loads(x) for x in (learner.dir / "metrics.jsonl").read_text().splitlines()]
        assert lines[-1]["learner/stopped"] == learner.error
        again = control.new_session(private=False)
        ask(server, again.key, "still served?")  # the server answers with the weights it has
        assert [t.policy_version for t in server.store.iter_turns(session_id=again.row.id)] == [0]
    finally:
        control.close()
        learner.stop()
        server.stop()


def learner_item(turn: Any) -> Any:
    from lego.conductor.serve_learner import turn_item

    return turn_item(turn)


@pytest.mark.slow  # ~60-90 s: three `lego serve` processes on the tiny model
def test_lego_serve_learn_from_the_cli_trains_survives_sigkill_and_rolls_back(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "serve"
    base = [sys.executable, "-m", "lego", "serve", "--dir", str(directory)]
    opts = ["-o", f"engine.model={tiny_model_dir}", "--device", "cpu", "--port", "0"]
    learn = ["--learn", "-o", "serve.learn_batch=2", "-o", "serve.learn_poll_s=0.3", "-o", "proxy.default_max_tokens=8"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def start(*more: str) -> tuple[subprocess.Popen[str], list[str]]:
        proc = subprocess.Popen([*base, *opts, *learn, *more], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)  # fmt: skip
        lines: list[str] = []
        wait_for(proc, lines, "open a session")
        return proc, lines

    def cli(*args: str) -> str:
        argv = [*base, *args] if args[0] != "feedback" else [*base[:3], *args, "--dir", str(directory)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    proc, lines = start()
    try:
        assert any("learning: serving the starting weights" in line for line in lines)
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in cli("session", "new", "--id", "me").splitlines()
        )
        url = json.loads((directory / "serve.json").read_text())["model_url"]
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=exports["OPENAI_API_KEY"], max_retries=0)
        for q in ("first question", "second question"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": q}])
        cli("feedback", "me", "0", "+1")
        cli("feedback", "me", "1", "-1", "wrong")
        cli("session", "end", "me")
        wait_for(proc, lines, "learner step 1 | 2 turns")
        assert (directory / "learner" / "checkpoints" / "step_000001").is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    proc, lines = start()  # after a SIGKILL: the newest checkpoint's weights, the step count kept
    try:
        assert any("learning: serving learner step 1" in line for line in lines)
    finally:
        assert interrupt(proc, lines) == 0
    proc, lines = start("--rollback", "0")
    try:
        assert any("learning: serving the starting weights" in line for line in lines)
    finally:
        assert interrupt(proc, lines) == 0
    bad = subprocess.run([*base, *opts, "--rollback", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "give --learn" in bad.stderr


_READERS: weakref.WeakKeyDictionary[subprocess.Popen[str], threading.Thread] = weakref.WeakKeyDictionary()


def wait_for(proc: subprocess.Popen[str], lines: list[str], text: str, timeout: float = 240.0) -> None:
    """Wait until a line of the server's output holds ``text`` (the process ending first fails the test).
    One reader per process reads its output to the end into ``lines``: a child whose pipe nobody drains
    blocks on its next write once the pipe is full."""
    out = proc.stdout
    assert out is not None
    if proc not in _READERS:

        def read() -> None:
            for line in out:
                lines.append(line)

        _READERS[proc] = threading.Thread(target=read, daemon=True)
        _READERS[proc].start()
    reader, deadline = _READERS[proc], time.monotonic() + timeout
    while not any(text in line for line in list(lines)):
        if not reader.is_alive() or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} within {timeout:.0f} s (rc {proc.poll()}):\n{''.join(lines)}")
        time.sleep(0.05)


def interrupt(proc: subprocess.Popen[str], lines: list[str], timeout: float = 60.0) -> int:
    """Ctrl-C the server and its exit code; one still running after ``timeout`` has its threads' stacks
    printed (lego's SIGUSR1 handler) into the failure, then is killed."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(3)
        proc.kill()
        proc.wait(30)
        raise AssertionError(f"lego serve still ran {timeout:.0f} s after SIGINT:\n{''.join(lines[-200:])}") from None
