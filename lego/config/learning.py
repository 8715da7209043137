"""Learning from use: ``lego serve``, the long-lived endpoint for a person's own harnesses (``[serve]``)."""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from lego.config.base import Section

__all__ = ["ServeConfig"]


class ServeConfig(Section):
    """`lego serve`: where sessions are stored, where harnesses connect, how long turns are kept.

    The engine and chat template come from ``[engine]`` and the recording from ``[proxy]``'s
    settings (``default_max_tokens``, ``reasoning_history``, ...), exactly as for `lego proxy`."""

    dir: str | None = Field(
        None,
        description="The serve directory: learn.db (the store), control.sock (the control face, this user "
        "only), serve.json (where the model face listens). None: <data dir>/serve (LEGO_DATA_DIR).",
    )
    host: str = Field(
        "127.0.0.1",
        description="Address of the model face harnesses connect to (each request's API key names its session, "
        "so it grants nothing else). Nothing leaves the machine unless you bind a routable address.",
    )
    port: int = Field(8200, ge=0, le=65535, description="Port of the model face (0: a free one, printed).")
    retention_days: float | None = Field(
        30.0,
        gt=0,
        description="Turns (and their feedback) older than this are deleted, at start-up and hourly while serving. "
        "None: kept until `lego serve purge`.",
    )
    redact_literals: list[str] = Field(
        default_factory=list,
        description="Exact strings redacted wherever they appear, besides the built-in patterns (API keys, tokens, "
        "private keys, secret-looking KEY=value lines) and the harness's own API key: e.g. a password of yours.",
    )
    judge: Literal["rules", "model"] = Field(
        "rules",
        description="`lego serve judge`: `rules` (the next state's tests, failed commands, the person's words and "
        "feedback, scored by the rubric in lego.learn.judge) or `model` (a judge model scores each turn from its "
        "next state, by the documented rubric).",
    )
    judge_url: str | None = Field(
        None,
        description="The model judge's OpenAI-compatible base URL (ending in /v1). None: the policy itself "
        "([engine]), served in-process for the judging run. A URL off this machine is refused unless "
        "serve.judge_allow_remote. Its API key, if it needs one, comes from the LEGO_JUDGE_API_KEY environment "
        "variable (never from a config file).",
    )
    judge_model: str = Field("policy", description="The `model` field sent to serve.judge_url.")
    judge_votes: int = Field(
        1, ge=1, le=32, description="Replies sampled per turn; the verdict is their mean score (OpenClaw-RL's vote)."
    )
    judge_temperature: float = Field(
        0.0, ge=0, le=2, description="The judge's sampling temperature (> 0 when serve.judge_votes > 1)."
    )
    judge_max_tokens: int = Field(512, ge=16, description="Most tokens of one judge reply.")
    judge_allow_remote: bool = Field(
        False,
        description="Let serve.judge_url name another machine: your sessions' (redacted) turns are sent there.",
    )

    learn: bool = Field(
        False,
        description="Train while serving: each pass judges what settled (serve.judge), trains one step on "
        "serve.learn_batch scored turns (each turn's advantage its judge's score minus serve.learn_baseline) and "
        "swaps the new weights in between requests; checkpoints in <serve dir>/learner "
        "(lego.conductor.serve_learner).",
    )
    learn_batch: int = Field(8, ge=1, description="Scored turns per learner step.")
    learn_pick: Literal["balanced", "freshest"] = Field(
        "balanced",
        description="Which ready turns make a learner step (serve.learn_signal=reward|both; opd takes the freshest). "
        "`balanced`: the freshest turn, then the freshest of each score in turn, the scarcest score first, so a "
        "rare score fills up to its share of the step at once. `freshest`: the freshest serve.learn_batch, and "
        "with reward one ready turn that scored otherwise joins a batch whose scores all agree. Default "
        "`balanced`: the person thanks few sessions and every turn of a thanked attempt scores alike, so under "
        "`freshest` those turns trained one a step and went stale waiting (measured: 36 of 70 thanked turns in "
        "a 30-minute `lego bench use`).",
    )
    learn_baseline: Literal["batch", "running", "situation", "none"] = Field(
        "batch",
        description="What each turn's score is centred on before it is its advantage (the scalar part of "
        "serve.learn_signal=reward|both; opd's per-token advantages are untouched). `batch`: the mean score of "
        "the step's own turns, so every step's advantages sum to zero and no step pushes every sampled token "
        "down -- what collapsed the policy without a baseline (mostly failing sessions, only negative "
        "advantages). A batch with no advantage at all is not a step, since AdamW's momentum would move the "
        "weights on a step without a gradient: with serve.learn_signal=reward a ready turn that scored "
        "otherwise joins one whose scores all agree, or its turns wait. `running`: an exponential moving average of "
        "past steps' mean scores (serve.learn_baseline_rate; the first step uses its own mean), kept in the "
        "learner checkpoint; it lags, so after a sudden drop in scores a step can still be all negative. "
        "`situation`: per turn, the mean score of the recent turns (within serve.learn_max_staleness steps) served "
        "with as many user messages in the request -- after as many re-queries -- so a situation where every "
        "recent turn failed pushes nothing down (lego.learn.baseline). `none`: "
        "the raw score (no baseline). Default `batch`: it cannot repeat the measured collapse, needs no state, "
        "and has no lag.",
    )
    learn_baseline_rate: float = Field(
        0.1,
        gt=0,
        le=1,
        description="serve.learn_baseline=running: the newest step's weight in the moving average "
        "(b <- b + rate x (step mean - b)); 1 is the previous step's mean alone.",
    )
    learn_baseline_std: bool = Field(
        False,
        description="serve.learn_baseline=batch: also divide the centred scores by their sample standard deviation "
        "(GRPO's normalisation). Off by default: with a batch of a few turns the standard deviation is itself "
        "noisy, and when the scores nearly agree it is tiny, so a small difference (one -0.4 among -0.5s) becomes "
        "a full-size update; the judge's scores already share one scale, [-1, 1].",
    )
    learn_signal: Literal["reward", "opd", "both"] = Field(
        "reward",
        description="What a turn trains with: `reward`, the judge's score as the advantage of every token; `opd`, "
        "hindsight on-policy distillation: a hint from the next state joins the context (the teacher), and each "
        "recorded token's advantage is log pi_teacher - log pi_student (turns without a hint are skipped); `both`, "
        "the score plus serve.learn_opd_weight x that difference.",
    )
    learn_opd_weight: float = Field(1.0, gt=0, description="The distillation term's weight (serve.learn_signal).")
    learn_opd_clip: float | None = Field(
        1.0,
        gt=0,
        description="serve.learn_signal=opd|both: each token's gap log pi_teacher - log pi_student is clipped to "
        "[-c, c] nats before it trains (None: unclipped). Measured unclipped (`lego bench use --signal opd`, "
        "README), single tokens reached |gap| 12-13 every step and the policy lost its tool-call format.",
    )
    learn_opd_centre: bool = Field(
        True,
        description="serve.learn_signal=opd|both: subtract the step's mean gap over its hinted tokens (after "
        "clipping). The gap's expectation under the student's own samples is -KL(student || teacher) <= 0, so "
        "uncentred it pushes most sampled tokens down on every step -- the same collapse as a reward with no "
        "baseline; centred, tokens the hinted context favours more than the step's average go up, the rest down.",
    )
    learn_poll_s: float = Field(10.0, gt=0, description="How often the learner looks for newly settled turns.")
    learn_keep_checkpoints: int | None = Field(
        20,
        ge=1,
        description="Learner checkpoints kept (the newest; each LoRA one also holds the merged weights `lego eval` "
        "reads); `--rollback N` reaches only a kept step. None: keep every one.",
    )
    learn_max_staleness: int = Field(
        4,
        ge=0,
        description="A turn sampled more than this many learner steps before the current weights is not trained "
        "(the decoupled off-policy correction of [algorithm] covers the lag up to it).",
    )
    learn_heldout: str | None = Field(
        None,
        description="A held-out check that stops the learner: a task source with hidden tests as SOURCE[:split] "
        "(e.g. boundary:heldout). Its first serve.learn_heldout_limit tasks are scored through lego's eval path "
        "(eval.harnesses[0], eval.samples per task at eval.temperature, seeds from eval.seed) on the weights served "
        "when the learner starts -- once: the score is kept in <serve dir>/learner/heldout.json -- and on the newest "
        "weights every serve.learn_heldout_every steps. When the newest is more than serve.learn_heldout_tolerance "
        "below the start's, the learner rolls back to the best step measured (as --rollback does) and stops; "
        "serving goes on. None: no check.",
    )
    learn_heldout_every: int = Field(
        10, ge=1, description="serve.learn_heldout: the newest weights are scored after every N learner steps."
    )
    learn_heldout_limit: int | None = Field(
        30, ge=1, description="serve.learn_heldout: the first N tasks of the source are scored (None: all)."
    )
    learn_heldout_tolerance: float = Field(
        0.1,
        ge=0,
        le=1,
        description="serve.learn_heldout: how far (absolute pass@1) the newest score may fall below the start's "
        "before the learner rolls back and stops. Mind the noise: with 30 tasks x 2 samples at 15% pass@1 a "
        "difference of two scores has a standard error near 0.06 (the same tasks and seeds make it somewhat less).",
    )

    @model_validator(mode="after")
    def _baseline_has_signal(self) -> ServeConfig:
        if self.learn_baseline_std and self.learn_baseline != "batch":
            raise ValueError(
                f"serve.learn_baseline_std=true divides by the batch's spread, but serve.learn_baseline="
                f"{self.learn_baseline!r}: set serve.learn_baseline=batch or serve.learn_baseline_std=false"
            )
        if self.learn_baseline == "batch" and self.learn_batch == 1 and self.learn_signal != "opd":
            raise ValueError(
                "serve.learn_baseline=batch with serve.learn_batch=1 centres each turn on itself: every advantage "
                "would be 0; give serve.learn_batch >= 2 or serve.learn_baseline=running"
            )
        return self

    @model_validator(mode="after")
    def _judge_stays_here(self) -> ServeConfig:
        if self.judge_votes > 1 and self.judge_temperature == 0:
            raise ValueError(
                f"serve.judge_votes={self.judge_votes} at serve.judge_temperature=0 samples the same reply "
                f"{self.judge_votes} times: give serve.judge_temperature > 0 (e.g. 0.6) or serve.judge_votes=1"
            )
        if self.judge_url is not None:
            parts = urlsplit(self.judge_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"serve.judge_url={self.judge_url!r} is not an http(s) URL: give e.g. http://127.0.0.1:8000/v1"
                )
            if not (_loopback(parts.hostname) or self.judge_allow_remote):
                raise ValueError(
                    f"serve.judge_url={self.judge_url!r} is off this machine, and the judge is sent your sessions: "
                    "serve a judge on 127.0.0.1, or set serve.judge_allow_remote=true to send them there"
                )
        return self


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
