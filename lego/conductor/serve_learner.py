"""The learner of `lego serve --learn`: judged turns of people's sessions train the policy while it serves.

    learner = ServeLearner.build(cfg, server, engine)     # before server.start()
    learner.resume(rollback=None)     # the newest checkpoint's weights served (or step N's: --rollback N)
    server.start(); learner.start()   # a thread: judge, pick, train, swap, checkpoint -- every serve.learn_poll_s
    ...
    learner.stop(); server.stop()

**A pass** (:meth:`ServeLearner.step`): the judge (``serve.judge``) scores every settled turn not
judged yet (:func:`lego.learn.judge.judge_store`); :func:`lego.learn.batches.pick_turns` lists the
scored turns not yet used, and marks for good those that can never be trained (no ids, a forced
call, another temperature, too stale, rolled back); once ``serve.learn_batch`` are ready, the
freshest of them make one step -- when one of them holds tokens the served weights sampled (the
fidelity gate measures those: no step goes unchecked; older ones wait, until too stale). Each turn is one segment: the engine prompt as context, its sampled
ids with their recorded logprobs and per-token policy versions (mask 1 throughout: a served turn
is all policy), its advantage the judge's score minus the baseline (``serve.learn_signal = "reward"``).

**A batch with no signal is not a step.** When no token of the batch carries an advantage (under
``batch``, scores that all agree), the learner does not step: AdamW would still move every weight
by its momentum, and measured so (a 30-minute `lego bench use`, 51 of 64 steps flat) those steps
moved the weights as far as the ones with a gradient and held-out pass@1 fell from 17.5% to 5% of
the sweep. Before that, the batch is composed (``serve.learn_pick``): ``balanced`` (default, with a
scalar part) takes the freshest ready turn, then the freshest of each score in turn, the scarcest score
first (:func:`lego.learn.batches.balanced_batch`), so the turns of a thanked attempt train in one step
instead of one a step while the rest go stale; ``freshest`` takes the freshest, and with ``reward`` the
freshest ready turn whose score would give the batch a signal (one that differs from the others under
``batch`` or from the running average) takes the least fresh one's place. Failing a signal the turns
wait (``learner/flat_passes`` counts such passes). A running baseline starts with the first step that
has a signal, so a first batch whose scores all agree does not start it.

**The baseline** (``serve.learn_baseline``, :class:`lego.learn.baseline.Baseline`): ``batch`` centres
each step's scores on their mean, ``running`` subtracts a moving average of past steps' mean scores
(updated after each step), ``none`` leaves the score as it is. Without one, a policy that mostly
fails gets only negative advantages, which push down every sampled token, the tool-call format
included (the first `lego bench use`: held-out 15.7% → 0/131 in 9 steps). The running baseline's
state is saved in each checkpoint (``extra["baseline"]``), so a resume or ``--rollback N`` gets step
N's exactly. Distillation's per-token advantages (``opd``) take a baseline of their own (below);
``both`` centres each part on its own.

**Hindsight on-policy distillation** (``"opd"``, ``"both"``): the next state's directive part
(:func:`lego.learn.judge.hindsight_hint`: the person's correction, the failing tests, the raised
exception) is appended to the turn's conversation as a note (:data:`HINT_TEMPLATE`), rendered with
the chat template: the teacher's context, the same policy. The *recorded* ids are scored under
it and under their own prompt, by the trainer's current weights (no re-tokenisation: the same ids
in both), and each token's advantage is log π_teacher − log π_student, clipped to
``serve.learn_opd_clip`` nats and centred on the step's mean over its hinted tokens
(``serve.learn_opd_centre``: under the student's own samples the gap averages −KL(student ‖ teacher),
so uncentred it pushes most sampled tokens down every step; measured so, the policy lost its
tool-call format in 19 steps), times ``serve.learn_opd_weight``; ``both`` adds the judge's score,
centred as above (:func:`opd_advantages`). The loss takes per-token advantages
(:class:`~lego.algos.losses.LossInputs` ``token_advantages``). The trainer is ``lego train``'s: its fidelity
gate (rollout-train probability correlation) checks the recorded logprobs before any weight moves,
and the decoupled off-policy objective corrects tokens sampled by older weights, exactly as for
``training.max_staleness``. The new weights are copied into the engine between two decode steps
(:class:`~lego.training.weight_sync.InProcessCopy`, or the vLLM weight routes): serving never
pauses, and a reply in flight carries the version boundary in its per-token versions.

**Versions.** A turn's version in the store is the learner step whose weights sampled it: the
engine counts its weight loads from 0 in each process, so :meth:`resume` sets the recorder's
``version_base`` once (each later step is one load and one step, so the base holds).

**Exactness.** The turns of step N are marked ``trained`` at N *before* step N's checkpoint is
written; :meth:`resume` drops the marks of every step after the checkpoint it restores, so a
learner killed at any moment neither loses a turn nor trains one twice; and it marks
``rolled_back`` every turn sampled by weights after that checkpoint (served, then killed before
their checkpoint was written): no later step mistakes them for its own. ``--rollback N`` restores
step N (0: the starting weights), moves the later checkpoints aside (``learner/rolled_back/``),
forgets their marks, and the turns their weights sampled are never trained (``rolled_back``).

**The held-out check** (``serve.learn_heldout``, :mod:`lego.conductor.serve_heldout`): before the
first step the weights served are scored on held-out tasks (hidden tests) once, and the newest
every ``serve.learn_heldout_every`` steps; when the newest falls more than
``serve.learn_heldout_tolerance`` below the start's, the learner rolls back to the best step
measured (as ``--rollback`` does: later checkpoints set aside, what their weights sampled never
trained) and stops with the reason (:class:`~lego.conductor.serve_heldout.HeldoutDrop`).

**Failure.** An error in a pass (the fidelity gate, a judge that does not answer, any other) stops
the learner and says why (:attr:`ServeLearner.error`); serving goes on with the weights it has.
"""

from __future__ import annotations

import gc
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from lego.conductor.serve_heldout import HeldoutCheck, HeldoutDrop
from lego.config import LegoConfig, ProxyConfig
from lego.errors import ChatFormatError, ConfigError, LegoError
from lego.io import append_jsonl, atomic_write_text
from lego.learn.baseline import Baseline
from lego.learn.batches import LearnableTurn, balanced_batch, pick_turns
from lego.learn.judge import Judge, ModelJudge, RuleJudge, judge_store
from lego.learn.redact import Redactor
from lego.learn.server import LearnServer
from lego.models.chat import ChatFormat
from lego.proxies.server import ProxyServer
from lego.seams import Engine
from lego.training.checkpoint import load_latest, restore_checkpoint, save_checkpoint
from lego.training.items import TrainItem
from lego.training.trainer import Trainer
from lego.training.weight_sync import WeightSync, build_weight_sync
from lego.types import Segment

__all__ = ["HINT_TEMPLATE", "ServeLearner", "opd_advantages", "turn_item"]

HINT_TEMPLATE = "[Hindsight: what happened after your reply]\n{hint}\nReply again, taking this into account."
"""The note that turns a turn's context into the teacher's (hindsight on-policy distillation)."""


def turn_item(turn: LearnableTurn, advantage: float | None = None) -> TrainItem:
    """One served turn as the trainer's item: prompt as context, every sampled token trained (mask 1),
    with ``advantage`` (default: the turn's score, no baseline)."""
    n = len(turn.output_ids)
    segment = Segment(
        prompt_ids=turn.prompt_ids,
        response_ids=turn.output_ids,
        response_mask=[1] * n,
        response_logprobs=list(turn.logprobs),
        response_versions=list(turn.versions),
    )
    return TrainItem(
        segment=segment,
        advantage=turn.score if advantage is None else advantage,
        episode_id=f"{turn.session_id}:{turn.turn}",
        harness="serve",
    )


def _flat(item: TrainItem) -> bool:
    """No token of ``item`` carries an advantage (its gradient under the policy loss is zero)."""
    if item.token_advantages is not None:
        return not any(item.token_advantages)
    return item.advantage == 0.0


def opd_advantages(gaps: list[list[float]], clip: float | None, centre: bool) -> tuple[list[list[float]], float]:
    """The distillation advantages of one step's hinted turns from their raw per-token gaps
    (log pi_teacher - log pi_student): each clipped to [-clip, clip] (None: not), then, with ``centre``,
    the step's mean over all those tokens subtracted; also that mean (0.0 uncentred). See
    ``serve.learn_opd_clip`` and ``serve.learn_opd_centre`` for why."""
    shaped = [[max(-clip, min(clip, g)) for g in gap] if clip is not None else list(gap) for gap in gaps]
    count = sum(len(gap) for gap in shaped)
    mean = sum(sum(gap) for gap in shaped) / count if centre and count else 0.0
    return [[g - mean for g in gap] for gap in shaped], mean


class ServeLearner:
    """The learner thread of `lego serve --learn` (see the module docstring)."""

    def __init__(
        self,
        cfg: LegoConfig,
        server: LearnServer,
        engine: Engine,
        trainer: Trainer,
        weights: WeightSync,
        judge: Judge,
        *,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        judge_server: ProxyServer | None = None,
        chat_format: ChatFormat | None = None,
        heldout: HeldoutCheck | None = None,
        new_trainer: Callable[[], Trainer] | None = None,
    ) -> None:
        if cfg.serve.learn_signal != "reward" and chat_format is None:
            raise ConfigError(
                f"serve.learn_signal={cfg.serve.learn_signal!r} renders teacher contexts: pass the chat format"
            )
        self.chat = chat_format
        self.cfg = cfg
        self.server = server
        self.engine = engine
        self.trainer = trainer
        self.weights = weights
        self.judge = judge
        self.on_step = on_step
        self.dir = server.dir / "learner"
        self.version = 0
        """The learner step whose weights the engine serves."""
        self.flat_passes = 0
        """Passes whose batch carried no advantage and so made no step (the turns waited)."""
        self.error: str | None = None
        """Why the learner stopped, if a pass failed or the held-out check fell (serving goes on)."""
        sc = cfg.serve
        self.baseline = Baseline(
            sc.learn_baseline, sc.learn_baseline_rate, sc.learn_baseline_std, cfg.algorithm.adv_eps
        )
        """What each turn's score is centred on (``serve.learn_baseline``); its state is in every checkpoint."""
        self.heldout = heldout
        """The held-out check (``serve.learn_heldout``), or None."""
        self._new_trainer = new_trainer or (lambda: Trainer.from_config(cfg))
        self._judge_server = judge_server
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def build(
        cls,
        cfg: LegoConfig,
        server: LearnServer,
        engine: Engine,
        chat_format: Any,
        on_step: Callable[[dict[str, Any]], None] | None = None,
    ) -> ServeLearner:
        """The trainer for ``engine.model``, the weight delivery for ``engine``, the judge ``serve.judge``
        (the model judge without ``serve.judge_url`` is the served policy itself, on a loopback port), the
        held-out check ``serve.learn_heldout`` (scoring the weights ``engine`` serves)."""
        sc = cfg.serve
        weights = build_weight_sync(cfg.engine, engine)
        # First: its settings may be refused (the start's score kept with others), before a judge is served.
        heldout = HeldoutCheck.from_config(cfg, server.dir / "learner", engine, chat_format)
        judge: Judge = RuleJudge()
        judge_server = None
        if sc.judge == "model":
            url = sc.judge_url
            if url is None:
                judge_server = ProxyServer(engine, chat_format, ProxyConfig(host="127.0.0.1", port=0))
                judge_server.start()
                url = judge_server.base_url
            judge = ModelJudge.from_config(sc, url)
        trainer = Trainer.from_config(cfg)
        return cls(
            cfg,
            server,
            engine,
            trainer,
            weights,
            judge,
            on_step=on_step,
            judge_server=judge_server,
            chat_format=chat_format,
            heldout=heldout,
        )

    # ---- start, resume, rollback ----------------------------------------------------------------

    def resume(self, rollback: int | None = None) -> int:
        """Serve the newest checkpoint's weights (``rollback``: step ``rollback``'s, 0 the starting
        ones), with the baseline and held-out scores of that step, forget the marks of later steps, set the
        recorder's version base; returns the step."""
        ckpts = self.dir / "checkpoints"
        if rollback is None:
            path = load_latest(self.dir)
        else:
            path = ckpts / f"step_{rollback:06d}" if rollback else None
            if path is not None and not path.is_dir():
                have = sorted(int(p.name[5:]) for p in ckpts.glob("step_*") if p.name[5:].isdigit())
                raise ConfigError(
                    f"--rollback {rollback}: no learner checkpoint of step {rollback} in {ckpts}; "
                    f"there are steps {have or 'none'} (0: the starting weights)"
                )
            self._set_aside_after(rollback)
        extra = restore_checkpoint(self.trainer, path) if path is not None else {}
        self.baseline.load_state_dict(extra.get("baseline"))  # none saved (the start): a fresh baseline
        step = self.trainer.step_count
        self.server.store.unlearn_after(step)
        # What weights after this step sampled (rolled back, or pushed and then killed before their
        # checkpoint) never trains: those weights are gone, and new steps reuse their numbers.
        self._mark_rolled_back(step)
        if self.heldout is not None:
            self.heldout.resume(step)
        # A rollback to the starting weights pushes them too: the engine may serve a later step's.
        pushed = path is not None or rollback is not None
        local = self.weights.push(self.trainer) if pushed else int(self.engine.policy_version)
        self.server.recorder.version_base = step - local
        self.version = step
        return step

    def _mark_rolled_back(self, step: int) -> None:
        """Every turn sampled by weights after ``step`` is marked never to train: the new steps reuse
        those version numbers, so the mark must come before any of them is served."""
        store = self.server.store
        rows: list[tuple[str, int, int, str, float | None]] = []
        for t in store.iter_turns():
            versions = (t.tokens.versions if t.tokens else []) or [t.policy_version]
            if max(versions) > step and t.index is not None:
                rows.append((t.session_id, t.index, step, "rolled_back", None))
        if rows:
            store.mark_learned(rows)

    def _set_aside_after(self, step: int) -> None:
        ckpts = self.dir / "checkpoints"
        later = [p for p in ckpts.glob("step_*") if p.name[5:].isdigit() and int(p.name[5:]) > step]
        if not later:
            return
        aside = self.dir / "rolled_back" / time.strftime("%Y%m%d-%H%M%S")
        aside.mkdir(parents=True, exist_ok=True)
        for p in sorted(later):
            shutil.move(str(p), aside / p.name)
        kept = sorted(p for p in ckpts.glob("step_*") if p.name[5:].isdigit())
        if kept:
            atomic_write_text(ckpts / "latest", kept[-1].name + "\n")
        else:
            (ckpts / "latest").unlink(missing_ok=True)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lego-serve-learner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 120.0) -> None:
        """Stop after the pass in progress (a step in flight finishes and is saved), then release the judge
        and the held-out check's proxy."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._judge_server is not None:
            self._judge_server.stop()
            self._judge_server = None
        if self.heldout is not None and (self._thread is None or not self._thread.is_alive()):
            self.heldout.close()  # not under a check still running: its samples would be recorded as failures

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                while not self._stop.is_set() and self.step() is not None:
                    pass  # a backlog trains step after step
            except Exception as exc:  # gate, judge, held-out check, a bug: the learner stops, serving goes on
                reason = f"{type(exc).__name__}: {exc}"
                # Recorded before it is published: whoever sees `error` finds the reason in metrics.jsonl too.
                append_jsonl(self.dir / "metrics.jsonl", {"learner/stopped": reason, "time": time.time()})
                if self.on_step is not None:
                    self.on_step({"learner/stopped": reason})
                self.error = reason
                return
            self._stop.wait(self.cfg.serve.learn_poll_s)

    # ---- hindsight on-policy distillation -------------------------------------------------------

    def teacher_prompt(self, turn: LearnableTurn) -> list[int]:
        """The turn's conversation with its hint after it, rendered for a reply: the teacher's context."""
        assert self.chat is not None and turn.hint is not None
        note = {"role": "user", "content": HINT_TEMPLATE.format(hint=turn.hint)}
        return list(self.chat.render([*turn.messages, note], turn.tools or None, add_generation_prompt=True))

    def _distil(self, batch: list[LearnableTurn], items: list[TrainItem]) -> tuple[list[TrainItem], dict[str, float]]:
        """Each hinted turn's tokens scored under the teacher context and under their own (the same
        weights, the recorded ids): the difference, per token, is its advantage (plus the judge's
        score with ``both``)."""
        signal, weight = self.cfg.serve.learn_signal, self.cfg.serve.learn_opd_weight
        hinted: list[int] = []
        teachers: list[TrainItem] = []
        unrendered = 0
        for i, turn in enumerate(batch):
            if turn.hint is None:
                continue
            try:
                prompt = self.teacher_prompt(turn)
            except ChatFormatError:
                unrendered += 1
                continue
            hinted.append(i)
            teachers.append(
                items[i].model_copy(update={"segment": items[i].segment.model_copy(update={"prompt_ids": prompt})})
            )
        if signal == "opd":  # distillation alone: a turn it cannot teach from carries no advantage at all
            for i in set(range(len(batch))) - set(hinted):
                items[i] = items[i].model_copy(update={"advantage": 0.0})
        raw: list[list[float]] = []
        if hinted:
            teacher_lp = self.trainer.recompute(teachers)
            student_lp = self.trainer.recompute([items[i] for i in hinted])
            raw = [[t - s for t, s in zip(teacher_lp[k], student_lp[k], strict=True)] for k in range(len(hinted))]
        shaped, centre = opd_advantages(raw, self.cfg.serve.learn_opd_clip, self.cfg.serve.learn_opd_centre)
        for k, i in enumerate(hinted):
            base = items[i].advantage if signal == "both" else 0.0  # the centred score
            items[i] = items[i].model_copy(update={"token_advantages": [base + weight * g for g in shaped[k]]})
        gaps = [g for gap in raw for g in gap]
        clip = self.cfg.serve.learn_opd_clip
        return items, {
            "learner/opd_turns": float(len(hinted)),
            "learner/opd_unrendered": float(unrendered),
            "learner/opd_gap_mean": sum(gaps) / len(gaps) if gaps else 0.0,
            "learner/opd_gap_abs_max": max((abs(g) for g in gaps), default=0.0),
            "learner/opd_clipped": (sum(1 for g in gaps if abs(g) > clip) / len(gaps)) if gaps and clip else 0.0,
            "learner/opd_centre": centre,
        }

    # ---- one pass ------------------------------------------------------------------------------

    def step(self) -> dict[str, Any] | None:
        """Judge, pick, and train one step if a batch is ready; its metrics, or None (nothing to train yet).
        A held-out measurement due (the start's, or the newest weights') comes first and after; a drop
        rolls back and raises :class:`~lego.conductor.serve_heldout.HeldoutDrop`."""
        self._check_heldout()
        store = self.server.store
        judge_store(store, self.judge, redactor=Redactor(self.cfg.serve.redact_literals))
        signal = self.cfg.serve.learn_signal
        picked = pick_turns(
            store,
            judge=self.judge.name,
            temperature=self.cfg.algorithm.temperature,
            version=self.version,
            max_staleness=self.cfg.serve.learn_max_staleness,
            hints=signal != "reward",
            need_hint=signal == "opd",
        )
        if picked.skipped:
            store.mark_learned([(sid, turn, self.version, why, None) for sid, turn, why in picked.skipped])
        size = self.cfg.serve.learn_batch
        # The freshest first (the least off-policy), and never a step without a token the served weights
        # sampled: the fidelity gate measures only those, so every step keeps its rollout-train check.
        fresh = sorted(picked.ready, key=lambda t: max(t.versions, default=0), reverse=True)
        if len(fresh) < size or not any(self.version in t.versions for t in fresh[:size]):
            return None
        batch = fresh[:size]

        def centred(turns: list[LearnableTurn]) -> tuple[list[float], float]:
            scores = [t.score for t in turns]
            return self.baseline.advantages(scores, [t.situation for t in turns], picked.recent)

        def carries(turns: list[LearnableTurn]) -> bool:
            return any(centred(turns)[0])

        if signal != "opd" and self.cfg.serve.learn_pick == "balanced":
            # The scarce scores first, up to their share of the step (batches.py: thanked turns come in clumps).
            batch = balanced_batch(fresh, size)
        elif size > 1 and signal == "reward" and not carries(batch):
            # Scores that carry nothing under the baseline (all agree under `batch`, or all equal the running
            # average): the freshest ready turn that would give the batch a signal replaces the least fresh
            # (the freshest, which the gate measures, stays). With `both` the distillation part can still
            # teach from them: the batch stays as picked.
            batch = next((t for t in ([*batch[:-1], o] for o in fresh[size:]) if carries(t)), batch)
        t0 = time.monotonic()
        scores = [t.score for t in batch]
        # Distillation alone has no scalar part to centre: its per-token advantages are the teacher's gap.
        advantages, baseline = centred(batch) if signal != "opd" else (scores, 0.0)
        items = [turn_item(t, a) for t, a in zip(batch, advantages, strict=True)]
        distilled: dict[str, float] = {}
        if signal != "reward":
            items, distilled = self._distil(batch, items)
        if all(_flat(i) for i in items):
            # No token carries an advantage: not a step (module doc: AdamW's momentum would still move
            # the weights). The turns wait, unconsumed, until a turn scores otherwise or they go stale.
            self.flat_passes += 1
            return None
        metrics = self.trainer.train_step(items, policy_version=self.version)
        step = self.trainer.step_count
        if signal != "opd":
            self.baseline.update(scores)  # after the step, before its checkpoint: which holds it
        store.mark_learned(
            [(t.session_id, t.turn, step, "trained", i.advantage) for t, i in zip(batch, items, strict=True)]
        )
        local = self.weights.push(self.trainer)
        if step - local != self.server.recorder.version_base:
            raise LegoError(
                f"the engine serves weight version {local} after learner step {step}, but the store counts "
                f"version {self.server.recorder.version_base} + engine version: something else loaded weights "
                "into the engine; restart `lego serve --learn` (it resumes from the checkpoint)"
            )
        self.version = step
        # A LoRA checkpoint also holds the merged weights, so `lego eval` takes it as a model (as lego train's).
        merged = self.cfg.training.finetune == "lora"
        keep = self.cfg.serve.learn_keep_checkpoints
        extra = {"serve_version": step, "baseline": self.baseline.state_dict()}
        save_checkpoint(self.trainer, self.dir, extra=extra, export_merged=merged, keep_last=keep)
        line = {
            "step": step,
            "time": time.time(),
            "learner/turns": len(batch),
            "learner/score_mean": sum(scores) / len(scores),
            "learner/baseline": baseline,
            "learner/advantage_mean": sum(i.advantage for i in items) / len(items),
            "learner/backlog": len(picked.ready) - len(batch),
            "learner/skipped": len(picked.skipped),
            "learner/flat_passes": self.flat_passes,
            "learner/step_s": time.monotonic() - t0,
            **distilled,
            **{k: v for k, v in metrics.items() if isinstance(v, int | float)},
        }
        append_jsonl(self.dir / "metrics.jsonl", line)
        if self.on_step is not None:
            self.on_step(line)
        self._check_heldout()
        return line

    # ---- the held-out check --------------------------------------------------------------------

    def _check_heldout(self) -> None:
        """Measure what is due (:meth:`HeldoutCheck.pending`); on a drop, roll back to the best step
        measured and raise :class:`HeldoutDrop` (the learner stops; serving goes on)."""
        check = self.heldout
        if check is None or not check.pending(self.version):
            return
        t0 = time.monotonic()
        step = self.version
        pass1 = check.measure(step)
        assert check.reference is not None
        ref_step, ref = check.reference
        line: dict[str, Any] = {
            "heldout/step": step,
            "heldout/pass1": pass1,
            "heldout/reference": ref,
            "heldout/reference_step": ref_step,
            "heldout/s": time.monotonic() - t0,
            "time": time.time(),
        }
        append_jsonl(self.dir / "metrics.jsonl", line)
        if self.on_step is not None:
            self.on_step(line)
        if not check.dropped(step):
            return
        ckpts = self.dir / "checkpoints"
        best, best_score = check.best(lambda s: s == 0 or (ckpts / f"step_{s:06d}" / "trainer_state.json").is_file())
        self.roll_back(best)
        measured = "unmeasured" if best_score is None else f"{best_score:.3f}"
        raise HeldoutDrop(
            f"held-out pass@1 {pass1:.3f} at step {step} is more than {check.tolerance:g} below the start's "
            f"{ref:.3f} (step {ref_step}): rolled back to step {best} ({measured}); restart `lego serve --learn` "
            "to learn again from there"
        )

    def roll_back(self, step: int) -> None:
        """``--rollback step`` while serving: that step's weights (0: the starting ones) into the trainer and
        the engine, with its baseline and held-out scores; later checkpoints set aside, their turns never
        trained. The learner thread's own (between passes), or before :meth:`start`."""
        if step == 0:  # the trainer holds trained weights: a fresh one holds the starting ones
            del self.trainer
            gc.collect()
            self.trainer = self._new_trainer()
        self.resume(rollback=step)
        self._mark_rolled_back(step)  # again: turns recorded while the weights were being swapped
