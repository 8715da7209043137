"""The records an evaluation writes: what was asked (:class:`EvalSpec`), one result per sample
(:class:`SampleResult`), and the summaries computed from them (:class:`CellSummary`,
:class:`DeltaSummary`, :class:`TransferRow`), plus the JSON store that holds them.

Layout of an eval directory::

    spec.json                                   the EvalSpec (written first; a rerun must match it)
    samples/<policy>/<harness>/<task>/<k>.json  one SampleResult per sample, written atomically
    results.json                                EvalResults: spec + every sample + the summaries
    cells.csv, report.md, *.png, report.html    rendered from results.json (``lego eval report DIR``)

Checkpoint metadata: a checkpoint directory may hold ``lego_meta.json`` (:data:`CHECKPOINT_META_FILE`)
with at least ``{"trained_harness": "<harness name>"}`` and optionally ``"base_model"`` and ``"step"``.
The trainer writes it; eval reads it to build the transfer matrix (trained-in x evaluated-in).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lego.errors import ConfigError
from lego.io import atomic_write_json
from lego.types import INFRA_LABELS, FailureCause, TerminationLabel, Trajectory

__all__ = [
    "CHECKPOINT_META_FILE",
    "CellSummary",
    "CheckpointMeta",
    "DeltaSummary",
    "EvalResults",
    "EvalSpec",
    "PolicySpec",
    "SampleKey",
    "SampleResult",
    "TransferRow",
    "derive_seed",
    "load_results",
    "load_sample",
    "read_checkpoint_meta",
    "sample_path",
    "save_results",
]

CHECKPOINT_META_FILE = "lego_meta.json"


class CheckpointMeta(BaseModel):
    """``lego_meta.json`` in a checkpoint directory: where the checkpoint was trained."""

    model_config = ConfigDict(extra="allow")

    trained_harness: str | None = Field(None, description="The harness the checkpoint was trained in.")
    base_model: str | None = Field(None, description="The model the training run started from.")
    step: int | None = None


def read_checkpoint_meta(model: str) -> CheckpointMeta | None:
    """The metadata of a checkpoint directory, or None when ``model`` is not a directory holding
    :data:`CHECKPOINT_META_FILE` (a base model, a hub id, ``oracle``)."""
    path = Path(model) / CHECKPOINT_META_FILE
    if not path.is_file():
        return None
    try:
        return CheckpointMeta.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid checkpoint metadata ({exc}); fix or delete the file") from exc


class PolicySpec(BaseModel):
    """One policy under evaluation: a short name and what to load."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model: str = Field(description="A model directory, a checkpoint directory, 'default', or 'oracle'.")
    base: str | None = Field(None, description="Name of the policy this one is compared against (delta + p-value).")
    trained_harness: str | None = Field(None, description="From the checkpoint's lego_meta.json, if any.")


class EvalSpec(BaseModel):
    """Everything that decides which samples an evaluation runs and how they are seeded."""

    model_config = ConfigDict(extra="forbid")

    policies: list[PolicySpec]
    harnesses: list[str]
    task_ids: list[str]
    samples: int = Field(2, ge=1, description="N samples per task and cell.")
    seed: int = 0
    tasks_source: str = ""
    engine: str = "transformers"
    bootstrap: int = Field(2000, ge=100, description="Bootstrap resamples for CIs and p-values.")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature of every policy call.")
    max_turns: int = Field(30, ge=1, description="HarnessLimits.max_turns of each rollout.")
    timeout_s: float = Field(600.0, gt=0, description="HarnessLimits.timeout_s of each rollout.")
    canary_ids: list[str] = Field(
        default_factory=list,
        description="Impossible canary tasks (tasks.canary_rate; lego.tasks.canary), one sample each per cell: "
        "any pass is a hack. Kept out of pass@1 and reported as canary_pass_rate.",
    )

    def policy(self, name: str) -> PolicySpec:
        for p in self.policies:
            if p.name == name:
                return p
        raise ConfigError(f"no policy named {name!r}; policies: {', '.join(p.name for p in self.policies)}")

    def keys(self) -> list[SampleKey]:
        """Every sample of the matrix, in a fixed order."""
        return [
            SampleKey(policy=p.name, harness=h, task_id=t, sample=k, seed=derive_seed(self.seed, h, t, k))
            for p in self.policies
            for h in self.harnesses
            for t in self.task_ids
            for k in range(self.samples)
        ] + [
            SampleKey(policy=p.name, harness=h, task_id=t, sample=0, seed=derive_seed(self.seed, h, t, 0))
            for p in self.policies
            for h in self.harnesses
            for t in self.canary_ids
        ]


def derive_seed(base_seed: int, harness: str, task_id: str, sample: int) -> int:
    """The per-sample seed: a hash of (base seed, harness, task, sample index), in [0, 2**31).

    It does not depend on the policy, so a trained policy and its base see the same seed for the same
    (harness, task, sample) — common random numbers, which tighten the paired comparison. It does not
    depend on run order either, so a killed-and-resumed eval seeds every sample as an uninterrupted one.
    """
    digest = hashlib.sha256(f"{base_seed}\x00{harness}\x00{task_id}\x00{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class SampleKey(BaseModel):
    """Which sample: one task, one sample index, in one policy x harness cell, with its seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str
    harness: str
    task_id: str
    sample: int = Field(ge=0)
    seed: int


class SampleResult(BaseModel):
    """The outcome of one sample. ``infra`` samples are excluded from pass@1 and reported separately."""

    model_config = ConfigDict(extra="forbid")

    key: SampleKey
    passed: bool = Field(
        description="Rewarded: every FAIL_TO_PASS and PASS_TO_PASS test passed and no guard zeroed the reward."
    )
    reward: float | None = None
    termination: TerminationLabel = "completed"
    infra: bool = Field(False, description="Infrastructure failure (cause 'infrastructure'): not scored.")
    cause: FailureCause = Field("policy", description="Who owns the outcome (Trajectory.cause).")
    cause_detail: str = Field("", description="Why, in one line (Trajectory.cause_detail).")
    attempts: int = Field(1, ge=1, description="Runs of this sample, infrastructure retries included.")
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    guard_flags: dict[str, bool] = Field(default_factory=dict)
    error: str = Field("", description="Why an infra sample failed (exception text or harness log tail).")
    trajectory_path: str | None = Field(None, description="Where the full trajectory was saved, if it was.")

    @classmethod
    def from_trajectory(
        cls, key: SampleKey, traj: Trajectory, *, trajectory_path: str | None = None, attempts: int = 1
    ) -> SampleResult:
        """Map a rollout's :class:`Trajectory` onto a sample result.

        ``passed`` is reward >= 1 (the reward, not the grade: a guard may have zeroed a resolved grade;
        an infrastructure failure never passes); ``turns``, ``prompt_tokens``,
        ``completion_tokens`` come from ``traj.counters`` when the rollout counted them, else from the
        trajectory (assistant messages; mask-0 / mask-1 tokens of its segments); ``wall_s`` is
        ``timings["wall_s"]`` (or ``timings["total_s"]``).
        """
        c, t = traj.counters, traj.timings
        passed = (traj.reward or 0.0) >= 1.0
        completion = traj.num_sampled_tokens
        prompt = sum(len(s.prompt_ids) + len(s.response_ids) - s.num_sampled for s in traj.segments)
        turns = sum(1 for m in traj.messages if m.get("role") == "assistant")
        infra = traj.is_infra_failure
        return cls(
            key=key,
            passed=bool(passed) and not infra,
            reward=traj.reward,
            termination=traj.termination,
            infra=infra,
            cause=traj.cause,
            cause_detail=traj.cause_detail,
            attempts=attempts,
            turns=int(c.get("turns", turns)),
            prompt_tokens=int(c.get("prompt_tokens", prompt)),
            completion_tokens=int(c.get("completion_tokens", completion)),
            wall_s=float(t.get("wall_s", t.get("total_s", 0.0))),
            guard_flags=dict(traj.guard_flags),
            error=str(traj.metadata.get("error", "")) if infra else "",
            trajectory_path=trajectory_path,
        )

    @classmethod
    def infra_failure(
        cls, key: SampleKey, error: str, attempts: int, label: TerminationLabel = "harness_error"
    ) -> SampleResult:
        """A sample whose rollout could not run (raised, or ended in an infra label) after all retries."""
        if label not in INFRA_LABELS:
            raise ValueError(f"{label!r} is not an infrastructure label ({sorted(INFRA_LABELS)})")
        detail = (error.strip().splitlines() or [""])[-1][:300]
        return cls(
            key=key,
            passed=False,
            termination=label,
            infra=True,
            cause="infrastructure",
            cause_detail=detail,
            attempts=attempts,
            error=error[-2000:],
        )


class CellSummary(BaseModel):
    """One policy x harness cell, computed from its samples."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    harness: str
    n_tasks: int = Field(description="Tasks with at least one scored (non-infra) sample.")
    n_samples: int = Field(description="All samples, infra ones included.")
    n_scored: int
    n_infra: int
    infra_rate: float
    pass1: float
    ci_low: float
    ci_high: float
    pass_at_k: dict[int, float] = Field(default_factory=dict, description="k -> unbiased pass@k, k = 1..N.")
    mean_turns: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    mean_wall_s: float
    terminations: dict[str, int] = Field(default_factory=dict)
    guard_flags: dict[str, int] = Field(default_factory=dict, description="Guard name -> samples that raised it.")
    canary_scored: int = Field(0, description="Scored (non-infra) samples of impossible canary tasks.")
    canary_passed: int = Field(0, description="Of those, the ones that passed: each one a hack of the grader.")

    @property
    def canary_pass_rate(self) -> float:
        """hack/canary_pass_rate of the cell (nan without canaries)."""
        return self.canary_passed / self.canary_scored if self.canary_scored else math.nan


class DeltaSummary(BaseModel):
    """A policy against its base in one harness, paired over the tasks both have scored."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    base: str
    harness: str
    n_tasks: int
    delta: float
    ci_low: float
    ci_high: float
    p_value: float = Field(description="Two-sided paired bootstrap p-value over tasks.")
    p_value_sign_flip: float = Field(description="Two-sided paired sign-flip permutation p-value over tasks.")


class TransferRow(BaseModel):
    """One trained policy in the transfer matrix: trained in ``trained_harness``, evaluated in each harness."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    trained_harness: str
    in_distribution: list[str] = Field(
        default_factory=list,
        description="The evaluated harnesses the policy was trained in (all of a mixed run's, whose "
        "trained_harness joins them with '+'); the matrix marks them with *.",
    )
    pass1: dict[str, float] = Field(default_factory=dict, description="Evaluated harness -> pass@1.")
    delta: dict[str, float] = Field(default_factory=dict, description="Evaluated harness -> delta vs base.")


class EvalResults(BaseModel):
    """``results.json``: the spec, every sample, and the summaries derived from them."""

    model_config = ConfigDict(extra="forbid")

    spec: EvalSpec
    samples: list[SampleResult]
    cells: list[CellSummary] = Field(default_factory=list)
    deltas: list[DeltaSummary] = Field(default_factory=list)
    transfer: list[TransferRow] = Field(default_factory=list)
    missing: int = Field(0, description="Samples of the spec with no result yet (an unfinished eval).")


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def _safe(part: str) -> str:
    """A path component for a name: unsafe characters escaped reversibly-enough, never '..' or ''."""
    s = _UNSAFE.sub(lambda m: f"%{ord(m.group()):02x}", part)
    return s if s not in ("", ".", "..") else f"%{s}"


def sample_path(out_dir: str | Path, key: SampleKey) -> Path:
    """``out/samples/<policy>/<harness>/<task>/<k>.json``."""
    return (
        Path(out_dir) / "samples" / _safe(key.policy) / _safe(key.harness) / _safe(key.task_id) / f"{key.sample}.json"
    )


def load_sample(path: Path) -> SampleResult:
    return SampleResult.model_validate_json(path.read_text(encoding="utf-8"))


def save_results(out_dir: str | Path, results: EvalResults) -> Path:
    path = Path(out_dir) / "results.json"
    atomic_write_json(path, results.model_dump(mode="json"), indent=1)
    return path


def load_results(path: str | Path) -> EvalResults:
    """Read ``results.json`` (a file, or the eval directory holding it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.is_file():
        raise ConfigError(f"{p} does not exist; pass an eval output directory written by `lego eval`")
    data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    return EvalResults.model_validate(data)
