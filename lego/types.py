"""The shared vocabulary: records that cross the seams between proxy, engine, sandbox, harness,
trainer and eval. Every record is a pydantic model and round-trips through JSON unchanged.

Token-level records keep parallel lists (``response_ids[i]`` goes with ``response_mask[i]``,
``response_logprobs[i]`` and ``response_versions[i]``); validators check the lengths agree.

"No logprob" (a token the policy did not sample: a tool result, a template token, padding) has one
encoding per kind of container: ``None`` in every Python list (a :class:`Segment`, a trainer's
``rollout_logprobs`` override), :data:`NO_LOGPROB` (NaN) inside a numeric array (the recorder's open
segment, the trainer's padded batch), where the mask says which entries are real. It is never a
number: 0.0 reads as log p = 0, i.e. p = 1, and a NaN a reader forgot to mask poisons the result
instead of passing for one. :func:`logprobs_to_array` and :func:`logprobs_from_array` convert.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "INFRA_LABELS",
    "NO_LOGPROB",
    "CounterName",
    "DiscardedGeneration",
    "Endpoint",
    "ExecResult",
    "FailureCause",
    "FinishReason",
    "Generation",
    "GradeResult",
    "HarnessLimits",
    "HarnessResult",
    "MainThreadSpec",
    "RequestContext",
    "SamplingOverride",
    "SamplingParams",
    "Segment",
    "SessionSpec",
    "SideThread",
    "StepMetrics",
    "Task",
    "TaskEnvironment",
    "TerminationLabel",
    "Trajectory",
    "logprobs_from_array",
    "logprobs_to_array",
]

TerminationLabel = Literal["completed", "overlong", "max_turns", "cut", "timeout", "harness_error", "env_error"]
"""How a rollout ended (``cut``: a straggler stopped at a turn boundary, ``training.straggler_multiple``). ``env_error`` and a ``harness_error`` not caused by the policy are
infrastructure failures: masked out of the loss and counted, never scored as reward 0."""

INFRA_LABELS: frozenset[str] = frozenset({"env_error", "harness_error"})
FailureCause = Literal["policy", "infrastructure"]

FinishReason = Literal["stop", "length", "abort"]

NO_LOGPROB = float("nan")
""""No logprob" inside a numeric array (see the module docstring); in a Python list it is ``None``."""


def logprobs_to_array(values: Iterable[float | None]) -> list[float]:
    """A list's logprobs as an array's: ``None`` becomes :data:`NO_LOGPROB`."""
    return [NO_LOGPROB if v is None else v for v in values]


def logprobs_from_array(values: Iterable[float]) -> list[float | None]:
    """An array's logprobs as a list's: :data:`NO_LOGPROB` (any NaN) becomes ``None``."""
    return [None if math.isnan(v) else v for v in values]


CounterName = Literal[
    # the recorder's (lego.proxies.recorder.SessionRecorder.counters)
    "calls",  # generations recorded
    "prompt_tokens",  # prompt tokens over all calls (a rendered history counts once per call)
    "completion_tokens",  # tokens the engine generated
    "rewrites",  # segments sealed because the client rewrote the history
    "retries",  # calls that replaced the last assistant turn (its generation discarded)
    "template_unstable",  # renders where the chat template was not prefix-stable
    "tool_call_parse_failures",  # tool calls the parser could not read
    "overflows",  # calls refused for the context window
    "side_threads_evicted",  # side threads dropped to keep their number bounded
    "reasoning_seals",  # rewrites caused by the template dropping old reasoning
    "reprefill_tokens",  # prompt tokens prefilled again after such a seal
    "kept_reasoning_tokens",  # reasoning tokens kept in history (proxy.reasoning_history = "keep")
    "constrained_tokens",  # tokens written under a forced tool call's constraint
    "hosted_tools_dropped",  # hosted tools left out of requests
    # its summary (SessionRecorder.summary_counters)
    "segments",
    "threads",
    "turns",  # main-thread turns; the rollout overwrites it with the harness's own count when it has one
    "side_calls",
    # the session's (lego.proxies.service)
    "engine_time_s",
    "proxy_time_s",
    "engine_unavailable",
    "engine_errors",
    "tool_choice_failures",
]
"""The names ``Trajectory.counters`` may hold: every writer and reader uses one of these, so a
misspelt counter is a type error (mypy) and a validation error (loading), not a silent 0."""


class TaskEnvironment(BaseModel):
    """What a task's tests need besides its repo: the interpreter, the project installed with its test
    dependencies, the pytest plugins to load. Built once per distinct record (content-addressed, see
    :func:`lego.tasks.environments.environment_key`) and shared read-only by every sandbox of every task
    that names it; the agent and the grader run in the same one.

    A task without one runs on lego's own task runtime (the host interpreter with pytest only)."""

    model_config = ConfigDict(extra="forbid")

    python: str = Field(
        "",
        description='Interpreter: a version ("3.11": a python3.11 on this host) or, for an image task, an '
        'absolute path inside the image ("/opt/miniconda3/envs/testbed/bin/python"); "" = the one lego runs on.',
    )
    requirements: list[str] = Field(
        default_factory=list,
        description="pip requirement lines installed into the environment (the project's test dependencies, "
        "pinned; a local sdist or directory path also works). pytest must be among them or is added.",
    )
    import_roots: list[str] = Field(
        default_factory=lambda: ["."],
        description='Repo-relative directories put FIRST on sys.path ("src" for a src/ layout), so the repo '
        "under test is the code under test even when the environment also has an installed copy.",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description='pytest plugins loaded with -p (plugin autoload stays off in grading), e.g. "hypothesis" '
        'or "pytest_cov" when the project\'s own addopts need --cov.',
    )
    path: str | None = Field(
        None,
        description="Where the built environment lives on this host (set when the task is materialised, like "
        "repo_path); None for an image task, whose interpreter is in the image.",
    )


class Task(BaseModel):
    """One software-engineering task in SWE-bench's JSONL shape, plus how to build its environment.

    The SWE-bench fields keep their upstream names (``FAIL_TO_PASS``/``PASS_TO_PASS`` are lists of
    test ids; SWE-bench ships them as JSON-encoded strings, which are accepted and decoded).
    """

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    repo: str
    base_commit: str = ""
    problem_statement: str
    patch: str = Field(description="The gold patch (source files only).")
    test_patch: str = Field("", description="Hidden tests, applied only at grading time.")
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str = ""
    environment_setup_commit: str = ""
    hints_text: str = ""
    created_at: str = ""
    # How to build the environment (lego's additions; all optional).
    repo_path: str | None = Field(None, description="Local directory holding the pristine repo at base_commit.")
    image: str | None = Field(None, description="Container image for the docker backend.")
    dockerfile: str | None = Field(None, description="Dockerfile text to build the image from.")
    test_cmd: str = Field("python -m pytest", description="Command that runs tests; test ids are appended.")
    environment: TaskEnvironment | None = Field(
        None, description="The interpreter and packages the tests need (None: lego's own pytest runtime)."
    )
    split: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_json_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return json.loads(v) if v.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a list of test ids or a JSON-encoded list, got {v[:80]!r}") from exc
        return v


class SamplingParams(BaseModel):
    """How the engine samples. ``top_k=0`` and ``top_p=1.0`` mean no truncation."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0, description="0 means greedy decoding.")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="0 disables top-k truncation.")
    max_tokens: int = Field(256, ge=1)
    stop_token_ids: list[int] = Field(default_factory=list)
    seed: int | None = None
    guided_regex: str | None = Field(
        None,
        description="Guided decoding: the generated text must match this regex in full and ends when it does "
        "(the dialect of lego.models.tool_grammar; a forced tool call's arguments and closing). None: unconstrained.",
    )


class Generation(BaseModel):
    """What the engine returns for one prompt: the sampled ids, each one's logprob and the policy
    version that sampled it.

    ``logprobs[i]`` is log p(token_ids[i] | prefix) under the distribution the engine documents
    (for lego's engines: softmax(logits / temperature) before any top-p / top-k truncation), with
    the weights of version ``versions[i]``. A generation that spans a weight update (the in-process
    engine swaps weights between decode steps) carries the boundary: ``versions`` steps up where the
    new weights took over. ``policy_version`` is the version of its first token. A record without
    ``versions`` (an engine that reports one version per response, an older record) means every
    token has ``policy_version``; validation fills the list in, so a reader always finds one entry
    per token.
    """

    model_config = ConfigDict(extra="forbid")

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int = 0
    versions: list[int] = Field(
        default_factory=list, description="The policy version that sampled each token (parallel to token_ids)."
    )
    prompt_tokens: int = 0
    engine_time_s: float = 0.0
    constrained: bool = False
    """Drawn under ``SamplingParams.guided_regex``: from the policy's distribution restricted by the
    constraint, not from the policy's own -- recorded, flagged, never trained on."""

    @model_validator(mode="after")
    def _lengths(self) -> Generation:
        n = len(self.token_ids)
        if n != len(self.logprobs):
            raise ValueError(f"{n} token_ids but {len(self.logprobs)} logprobs")
        if not self.versions:
            self.versions = [self.policy_version] * n
        elif len(self.versions) != n:
            raise ValueError(f"{n} token_ids but {len(self.versions)} versions")
        elif "policy_version" not in self.model_fields_set:
            self.policy_version = self.versions[0]
        elif self.versions[0] != self.policy_version:
            raise ValueError(
                f"policy_version={self.policy_version} but the first token's version is {self.versions[0]}"
            )
        return self

    def cut(self, n: int, finish_reason: FinishReason) -> Generation:
        """The first ``n`` tokens (with their logprobs and versions), ending with ``finish_reason``."""
        return self.model_copy(
            update={
                "token_ids": self.token_ids[:n],
                "logprobs": self.logprobs[:n],
                "versions": self.versions[:n],
                "finish_reason": finish_reason,
            }
        )


class Segment(BaseModel):
    """A token-exact slice of a conversation the trainer can optimise on.

    ``prompt_ids`` is the context the first generation saw. ``response_ids`` holds everything after
    it: sampled tokens (mask 1, with the engine's logprob and the policy version that sampled them)
    and the tool results, observations and template tokens in between (mask 0, logprob and version
    ``None``: no logprob is ever invented for a token the policy did not sample).

    ``constrained_spans`` are ``[start, end)`` ranges of ``response_ids`` drawn under a decoding
    constraint (a forced tool call's arguments: :attr:`Generation.constrained`). Their distribution
    is the constrained one, not the policy's, so they carry mask 0 -- the loss and the fidelity
    metrics never see them -- and keep the engine's logprob and version for inspection.
    """

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float | None] = Field(default_factory=list)
    response_versions: list[int | None] = Field(
        default_factory=list,
        description="The policy version that sampled each token; None where nothing was sampled, and at every "
        "token of a record that names no versions (the trainer counts those as its own version's).",
    )
    constrained_spans: list[tuple[int, int]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _parallel(self) -> Segment:
        n = len(self.response_ids)
        if n and "response_versions" not in self.model_fields_set:
            self.response_versions = [None] * n  # a record without versions: unknown, read as current
        lens = (len(self.response_mask), len(self.response_logprobs), len(self.response_versions))
        if any(x != n for x in lens):
            raise ValueError(f"response lists disagree in length: ids={n}, mask/logprobs/versions={lens}")
        for i, (m, lp) in enumerate(zip(self.response_mask, self.response_logprobs, strict=True)):
            if m not in (0, 1):
                raise ValueError(f"response_mask[{i}]={m}; must be 0 or 1")
            if m == 1 and lp is None:
                raise ValueError(f"response token {i} is marked sampled but has no logprob")
            if lp is not None and math.isnan(lp):
                raise ValueError(f"response_logprobs[{i}] is NaN; in a segment 'no logprob' is None")
        for start, end in self.constrained_spans:
            if not 0 <= start < end <= n or any(self.response_mask[start:end]):
                raise ValueError(f"constrained span [{start}, {end}) must lie in the response and have mask 0")
        return self

    @property
    def num_sampled(self) -> int:
        return sum(self.response_mask)

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


class DiscardedGeneration(BaseModel):
    """A generation rolled back by an exact retry, kept for inspection (never trained on)."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    policy_version: int
    versions: list[int] = Field(
        default_factory=list, description="Each token's policy version; empty: all policy_version (older records)."
    )
    reason: str


class SideThread(BaseModel):
    """A conversation in a session other than the agent's own (a subagent, a title generator, a
    quota probe): recorded token-exactly like the main thread, exported apart from it, and trained
    on only when ``training.train_side_threads`` is set (DESIGN.md "Faithful rollouts", rule 5)."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str = Field(description="The recorder's thread key (a hash of its system prompt and tools).")
    opening: str = Field("", description="The start of its system prompt (else its first user message).")
    has_tools: bool = False
    generations: int = 0
    segments: list[Segment] = Field(default_factory=list)


class MainThreadSpec(BaseModel):
    """What the harness's own conversation looks like, as its adapter declares it.

    The first thread whose opening request fits becomes the session's main thread and nothing
    else can (see :mod:`lego.proxies.recorder`). Without a declaration the proxy's default rule applies
    (the first thread with tools and a system prompt); a harness whose main request carries no
    tools should declare one, or an agent's own request with tools could outrank it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_contains: str | None = Field(
        None, min_length=1, description="Text the main request's system prompt contains (e.g. its opening line)."
    )
    tool_names: frozenset[str] = Field(
        default_factory=frozenset,
        description="Tool names the main request carries, every one of them (it may carry others too).",
    )

    @model_validator(mode="after")
    def _says_something(self) -> MainThreadSpec:
        if self.system_contains is None and not self.tool_names:
            raise ValueError("a main-thread declaration needs system_contains or tool_names (or both)")
        return self


class GradeResult(BaseModel):
    """The grader's verdict on one diff."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    resolved: bool
    tests: dict[str, str] = Field(default_factory=dict, description="test id -> passed|failed|error|skipped|missing")
    excluded_files: list[str] = Field(default_factory=list, description="Files dropped from the graded diff.")
    tampered: list[str] = Field(
        default_factory=list,
        description="Evidence that the test run forged its results (a test that passes as written but behaves "
        "unlike the reference where the expected outcome is hidden, a result record written twice...); "
        "non-empty means reward 0.",
    )
    behavioural: int = Field(
        0,
        description="FAIL_TO_PASS tests judged on their witnessed behaviour in the blind copy (lego.sandboxes.blind).",
    )
    bit_only: int = Field(
        0, description="FAIL_TO_PASS tests that rest on their reported pass/fail bit alone (nothing witnessed)."
    )
    unstable: int = Field(0, description="Reference witnesses dropped because two gold runs disagreed.")
    log: str = ""
    duration_s: float = 0.0


class HarnessResult(BaseModel):
    """How a harness process ended."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    reason: TerminationLabel
    logs: str = Field("", description="A tail excerpt of the harness's stdout/stderr.")
    wall_s: float = 0.0
    turns: int = 0


class Trajectory(BaseModel):
    """One rollout: what the policy sampled (segments), how it ended, and how it was judged."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    session_id: str
    task_id: str = ""
    harness: str = ""
    harness_version: str = ""
    policy: str = ""
    segments: list[Segment] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list, description="Snapshot of the main thread.")
    tools: list[dict[str, Any]] = Field(default_factory=list)
    discarded: list[DiscardedGeneration] = Field(default_factory=list)
    side_threads: list[SideThread] = Field(
        default_factory=list,
        description="The session's other conversations (subagents, title calls, quota probes), never in "
        "``segments``; trained on only with training.train_side_threads.",
    )
    termination: TerminationLabel = "completed"
    reward: float | None = None
    grade: GradeResult | None = None
    guard_flags: dict[str, bool] = Field(default_factory=dict)
    counters: dict[CounterName, float] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    cause: FailureCause = Field(
        default="policy",
        description="Who the outcome belongs to: 'policy' (scored, trained on) or 'infrastructure' "
        "(proxy/engine down, sandbox not created before the agent acted, a harness crash the agent's "
        "commands did not cause: masked out of the loss and out of pass@1, counted apart).",
    )
    cause_detail: str = Field(default="", description="Why the cause was attributed so, in one line.")
    created_at: float = Field(default_factory=time.time)

    @property
    def is_infra_failure(self) -> bool:
        return self.cause == "infrastructure"

    @property
    def num_sampled_tokens(self) -> int:
        return sum(s.num_sampled for s in self.segments)


class StepMetrics(BaseModel):
    """One line of ``metrics.jsonl``: a training (or validation) step's namespaced metrics."""

    model_config = ConfigDict(extra="forbid")

    step: int
    metrics: dict[str, float]
    wall_s: float = 0.0
    timestamp: float = Field(default_factory=time.time)


class Endpoint(BaseModel):
    """How a harness reaches its proxy session, as seen from where the harness runs.

    ``base_url`` is the OpenAI-style base (ends in ``/v1``); Anthropic clients take
    ``anthropic_base_url`` (no ``/v1``: the SDK appends it).
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    anthropic_base_url: str
    api_key: str = "lego-local"
    model: str = "lego-policy"
    session_id: str = "default"


class SamplingOverride(BaseModel):
    """A session that samples at ``temperature`` with no top-p/top-k truncation whatever the harness
    asks (training needs it: truncation biases the importance ratio; eval uses it so every harness
    samples alike). The proxy says so in the ``x-lego-sampling-override`` response header."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(ge=0.0)


class SessionSpec(BaseModel):
    """Everything a rollout tells the proxy about its session, as one record that every hop (rollout
    runner → ProxyServer → ProxyService → Session, or the control face's ``POST /s/{id}`` body) passes on
    unchanged, so a value dropped on the way is a type error rather than a silent default.

    ``seed``: with the session's generation index it seeds every sampling of the session (and the
    harness's own request ``seed``, when it sends one, is mixed in), so a rollout's tokens do not
    depend on what else the engine serves. ``max_turns``: main-thread turns before the session answers
    400; ``max_generations``: generations on every thread together. ``answer``: the task's gold patch,
    only for an engine that takes it (the oracle); never exported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sampling_override: SamplingOverride | None = None
    seed: int | None = None
    max_turns: int | None = Field(None, ge=1)
    max_generations: int | None = Field(None, ge=1)
    main_thread: MainThreadSpec | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    answer: str | None = Field(None, repr=False)


class RequestContext(BaseModel):
    """What the proxy knows about a call besides the prompt ids; engines may ignore it.

    The oracle engine reads ``tools`` (to find the harness's shell tool) and ``answer`` (the task's
    gold patch: given to a session only when the engine is the oracle; never exported).
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str = "default"
    api: Literal["chat", "messages", "responses", "gemini", "internal"] = "internal"
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    session_metadata: dict[str, Any] = Field(default_factory=dict)
    answer: str | None = Field(default=None, description="The gold patch, for the oracle engine only.")


class ExecResult(BaseModel):
    """The outcome of one command run in a sandbox."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    wall_s: float = 0.0


class HarnessLimits(BaseModel):
    """Limits one harness run must respect."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = 30
    timeout_s: float = 600.0
