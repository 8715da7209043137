"""The held-out check of `lego serve --learn`: the learner stops when its newest weights score worse.

    check = HeldoutCheck.from_config(cfg, learner_dir, engine, chat_format)   # None: serve.learn_heldout unset
    check.pending(step)          # the start's score is missing, or step is a multiple of learn_heldout_every
    check.measure(step)          # pass@1 of the weights the engine serves now; kept in learner/heldout.json
    check.dropped(step)          # the newest is more than learn_heldout_tolerance below the start's
    check.best(kept)             # the step to roll back to: the best score measured (its checkpoint kept)

**What scores.** The first ``serve.learn_heldout_limit`` tasks of ``serve.learn_heldout`` (hidden
tests), each sampled ``eval.samples`` times at ``eval.temperature`` in ``eval.harnesses[0]`` with
seeds from ``eval.seed``, through the validation of `lego train` (:func:`lego.conductor.loop.validate`:
lego's eval runner, the production rollout, the grader) -- no second evaluator. The rollouts reach
the *serving* engine through a recording proxy of their own (:meth:`ServedPolicy.around`), so what
is scored is exactly the weights served, with no second copy of the model loaded, and nothing of
theirs enters the store. The seeds do not depend on the policy, so every measurement samples the
same (task, sample) pairs: the comparison is paired.

**The start's score** is measured once, on the weights served when the learner first runs with the
check (the starting weights for a new learner; the resumed step's when the check is configured
later), before any step trains, and is kept in ``learner/heldout.json`` with the scores of later
steps. A restart neither measures it again nor loses it; a restart with other check settings (tasks,
samples, temperature, seed, harness) is refused, since the scores would not compare. Each
measurement's samples are an eval directory (``learner/heldout/reference``, ``.../step_NNNNNN``):
a learner killed mid-check resumes the samples on disk, with the same seeds on the same weights.
A resume (or rollback) to step N forgets the scores of the steps after N (the numbers are reused by
new weights) and sets their samples aside (``learner/heldout/rolled_back/``).

**The seam.** :class:`HeldoutCheck` takes a :data:`Scorer` (``out_dir -> pass@1``); the production one
is :class:`ServedScorer`. Tests inject a scripted one.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lego.config import LegoConfig
from lego.errors import ConfigError, LegoError
from lego.io import atomic_write_json
from lego.types import Task

__all__ = ["HeldoutCheck", "HeldoutDrop", "Scorer", "ServedScorer", "heldout_settings", "heldout_tasks"]

Scorer = Callable[[Path], float]
"""Held-out pass@1 of the weights the engine serves now; its samples go to the eval directory given."""

STATE_FILE = "heldout.json"


class HeldoutDrop(LegoError):
    """The held-out check fell: the learner rolled back and stops (serving goes on)."""


def heldout_tasks(cfg: LegoConfig) -> list[Task]:
    """The tasks of ``serve.learn_heldout`` (its first ``serve.learn_heldout_limit``); a source that does
    not load, or holds no task, is a :class:`ConfigError` naming the key."""
    from lego.tasks.sources import load_tasks

    source = cfg.serve.learn_heldout
    if source is None:
        return []
    try:
        tasks = load_tasks(source, None, cfg.serve.learn_heldout_limit)
    except LegoError as exc:
        raise ConfigError(f"serve.learn_heldout: {' '.join(str(exc).split())}") from exc
    if not tasks:
        raise ConfigError(
            f"serve.learn_heldout: {source!r} holds no tasks; `lego tasks list {source}` shows what it has"
        )
    return tasks


def heldout_settings(cfg: LegoConfig, task_ids: list[str]) -> dict[str, Any]:
    """What makes two held-out scores comparable: kept with them, compared on every start."""
    return {
        "source": cfg.serve.learn_heldout,
        "task_ids": task_ids,
        "harness": cfg.eval.harnesses[0],
        "samples": cfg.eval.samples,
        "temperature": cfg.eval.temperature,
        "seed": cfg.eval.seed,
        "max_turns": cfg.harness.max_turns,
    }


class ServedScorer:
    """The production :data:`Scorer`: `lego train`'s validation (:func:`lego.conductor.loop.validate`)
    of the weights ``engine`` serves, through a recording proxy of its own in front of it."""

    def __init__(self, cfg: LegoConfig, tasks: list[Task], engine: Any, chat_format: Any) -> None:
        from lego.conductor.rollout import RolloutRunner
        from lego.conductor.served_policy import ServedPolicy

        self.cfg, self.tasks = cfg, tasks
        self.policy = ServedPolicy.around(engine, chat_format, cfg.proxy, name="heldout")
        self.runner = RolloutRunner(cfg, self.policy)

    def __call__(self, out_dir: Path) -> float:
        from lego.conductor.loop import validate

        harness = self.cfg.eval.harnesses[0]
        metrics = validate(self.runner, self.cfg, self.tasks, out_dir)
        pass1 = float(metrics[f"val/pass1@{harness}"])
        if math.isnan(pass1):
            rate = metrics.get(f"val/infra_rate@{harness}")
            raise LegoError(
                f"held-out check: no sample of {out_dir} was scored (infrastructure failures: {rate}); "
                "see its trajectories"
            )
        return pass1

    def close(self) -> None:
        self.policy.close()


class HeldoutCheck:
    """The held-out check's state and its decisions (see the module doc)."""

    def __init__(
        self,
        directory: Path,
        settings: Mapping[str, Any],
        scorer: Scorer,
        *,
        every: int,
        tolerance: float,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if every < 1:
            raise ConfigError(f"serve.learn_heldout_every={every}: measure every N >= 1 learner steps")
        if not 0 <= tolerance <= 1:
            raise ConfigError(f"serve.learn_heldout_tolerance={tolerance}: an absolute pass@1 drop in [0, 1]")
        self.dir = Path(directory)
        self.path = self.dir / STATE_FILE
        self.settings = dict(settings)
        self.scorer = scorer
        self.every, self.tolerance = every, tolerance
        self._on_close = on_close
        self.reference: tuple[int, float] | None = None
        """(the step measured, its pass@1): the start's score."""
        self.scores: dict[int, float] = {}
        """Each later step measured: its pass@1."""
        if self.path.is_file():
            state = json.loads(self.path.read_text(encoding="utf-8"))
            if state.get("settings") != self.settings:
                raise ConfigError(
                    f"serve.learn_heldout: the start's held-out score in {self.path} was measured with other "
                    f"settings ({_diff(state.get('settings') or {}, self.settings)}), so later scores would not "
                    "compare with it; restore them, or move that file away to measure the weights served now as "
                    "the start"
                )
            ref = state.get("reference")
            self.reference = None if ref is None else (int(ref["step"]), float(ref["pass1"]))
            self.scores = {int(k): float(v) for k, v in (state.get("scores") or {}).items()}

    @classmethod
    def from_config(
        cls, cfg: LegoConfig, directory: Path, engine: Any, chat_format: Any, scorer: Scorer | None = None
    ) -> HeldoutCheck | None:
        """The check ``serve.learn_heldout*`` configures (None when unset); ``scorer`` replaces the
        production :class:`ServedScorer` (tests)."""
        sc = cfg.serve
        if sc.learn_heldout is None:
            return None
        tasks = heldout_tasks(cfg)
        settings = heldout_settings(cfg, [t.instance_id for t in tasks])
        on_close = None
        if scorer is None:
            served = ServedScorer(cfg, tasks, engine, chat_format)
            scorer, on_close = served, served.close
        return cls(
            directory, settings, scorer, every=sc.learn_heldout_every, tolerance=sc.learn_heldout_tolerance,
            on_close=on_close,
        )  # fmt: skip

    # ---- decisions ------------------------------------------------------------------------------

    def pending(self, step: int) -> bool:
        """A measurement is due at ``step``: the start's (never measured), or every ``every`` steps after it."""
        if self.reference is None:
            return True
        return step > self.reference[0] and step % self.every == 0 and step not in self.scores

    def dropped(self, step: int) -> bool:
        """``step``'s score is more than the tolerance below the start's."""
        if self.reference is None or step not in self.scores:
            return False
        return self.scores[step] < self.reference[1] - self.tolerance

    def best(self, kept: Callable[[int], bool]) -> tuple[int, float | None]:
        """The step to roll back to: the highest score measured among the steps ``kept`` can restore
        (the later of equals); the starting weights (0, unmeasured) when none can be."""
        measured = dict(self.scores)
        if self.reference is not None:
            measured.setdefault(self.reference[0], self.reference[1])
        candidates = [(score, step) for step, score in measured.items() if kept(step)]
        if not candidates:
            return 0, None
        score, step = max(candidates)
        return step, score

    # ---- state ----------------------------------------------------------------------------------

    def measure(self, step: int) -> float:
        """Score the weights served now as ``step``'s (the start's, when there is none yet) and keep it."""
        first = self.reference is None
        out = self.dir / "heldout" / ("reference" if first else f"step_{step:06d}")
        pass1 = float(self.scorer(out))
        if first:
            self.reference = (step, pass1)
        else:
            self.scores[step] = pass1
        self._save()
        return pass1

    def resume(self, step: int) -> None:
        """Forget the scores of the steps after ``step`` and set their samples aside
        (``heldout/rolled_back/<time>/``): their numbers will name other weights."""
        later = [s for s in self.scores if s > step]
        for s in later:
            del self.scores[s]
        root = self.dir / "heldout"
        dirs = sorted(d for d in root.glob("step_*") if d.name[5:].isdigit() and int(d.name[5:]) > step)
        if dirs:
            aside = root / "rolled_back" / time.strftime("%Y%m%d-%H%M%S")
            aside.mkdir(parents=True, exist_ok=True)
            for d in dirs:
                shutil.move(str(d), aside / d.name)
        if later:
            self._save()

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        ref = None if self.reference is None else {"step": self.reference[0], "pass1": self.reference[1]}
        state = {
            "settings": self.settings,
            "reference": ref,
            "scores": {str(k): v for k, v in sorted(self.scores.items())},
        }
        atomic_write_json(self.path, state, indent=1)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None


def _diff(was: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    keys = sorted(k for k in {*was, *now} if was.get(k) != now.get(k))
    shown = [f"{k}: was {_short(was.get(k))}, now {_short(now.get(k))}" for k in keys]
    return "; ".join(shown) or "none"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
