"""Where and on what the agent runs: ``[sandbox]``, ``[guards]``, ``[harness]`` (with each harness's typed
options) and ``[tasks]``."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from lego.config.base import Section

__all__ = [
    "HARNESS_OPTIONS",
    "ClaudeCodeOptions",
    "CodexOptions",
    "GuardsConfig",
    "HarnessConfig",
    "LegoAgentOptions",
    "NoOptions",
    "OpenCodeOptions",
    "SandboxConfig",
    "TasksConfig",
    "harness_name",
]


class SandboxConfig(Section):
    """Where each rollout's repository lives and commands run."""

    kind: Literal["local", "docker"] = Field(
        "local", description="local: bubblewrap on this host; docker: one container per sandbox (the docker extra)."
    )
    unsafe_no_isolation: bool = Field(
        False,
        description="Run agents without bubblewrap when it is missing. Only for trusted code on a disposable machine.",
    )
    cpu_seconds: int = Field(600, ge=1, description="RLIMIT_CPU per process.")
    memory_mb: int = Field(
        16384,
        ge=64,
        description="RLIMIT_AS (address space) per process. JS runtimes (node, bun: opencode, claude-code, codex) "
        "reserve several GB of address space up front, so a tight value fails them with 'Out of memory'.",
    )
    max_processes: int = Field(256, ge=8, description="Most processes inside one sandbox.")
    disk_mb: int = Field(
        2048,
        ge=16,
        description="Disk budget of one sandbox: the repo, /tmp, /var/tmp and HOME together. A write past it "
        "fails inside the sandbox (ENOSPC / EFBIG); the host disk is never filled by an agent.",
    )
    memory_budget_mb: int = Field(
        8192,
        ge=64,
        description="One memory budget for everything a sandbox holds: its processes and its in-memory file "
        "systems together, enforced by a memory cgroup where the host offers one (`lego doctor` says which).",
    )
    command_timeout_s: float = Field(
        120.0, gt=0, description="Wall time of one exec() before its process group is killed."
    )
    docker_image: str | None = Field(None, description="Default image for the docker backend when a task names none.")
    workdir: str | None = Field(None, description="Where sandboxes are created; default: a temp dir.")


class GuardsConfig(Section):
    """What a detected reward hack does to the reward (see `lego.sandboxes.guards`)."""

    on_detect: Literal["zero", "flag"] = Field(
        "zero",
        description="'zero': a rollout whose grading or trajectory shows a hack (tampering with tests or the "
        "grader, hack signatures) gets reward 0 and is kept for inspection; 'flag': the flag is recorded and the "
        "reward stands (for studying hacks, never for training).",
    )


class NoOptions(Section):
    """A harness configured entirely by lego (aider, mini-swe-agent, openhands): it takes no options."""


class LegoAgentOptions(Section):
    """Options of the built-in reference agent (``lego.harnesses.lego_agent_adapter.LegoAgentHarness``)."""

    python: str = Field("python3", description="The interpreter that runs the agent script inside the sandbox.")
    temperature: float = Field(
        1.0, ge=0, description="Temperature the agent asks for; the proxy's sampling override replaces it in training."
    )
    max_tokens: int = Field(1024, ge=1, description="Completion budget the agent asks for on every turn.")


class OpenCodeOptions(Section):
    """Options of the opencode adapter."""

    context_window: int = Field(32768, ge=1, description="Context window opencode is told the model has.")
    max_output_tokens: int = Field(4096, ge=1, description="Completion budget opencode asks for on every turn.")


class CodexOptions(Section):
    """Options of the Codex CLI adapter."""

    context_window: int = Field(32768, ge=1, description="Context window Codex is told the model has.")
    intercept: bool = Field(
        False, description="Route Codex through the mitmproxy interceptor instead of its base-URL setting."
    )


class ClaudeCodeOptions(Section):
    """Options of the Claude Code adapter."""

    intercept: bool = Field(
        False, description="Route Claude Code through the mitmproxy interceptor instead of ANTHROPIC_BASE_URL."
    )


HARNESS_OPTIONS: dict[str, type[BaseModel]] = {
    "lego-agent": LegoAgentOptions,
    "mini-swe-agent": NoOptions,
    "aider": NoOptions,
    "openhands": NoOptions,
    "opencode": OpenCodeOptions,
    "claude-code": ClaudeCodeOptions,
    "codex": CodexOptions,
    "qwen-code": NoOptions,
    "gemini-cli": NoOptions,
}
"""Registered harness name -> the typed model of its adapter's constructor options (same names as the
harness registry, :data:`lego.harnesses.base.HARNESSES`; a test keeps the two and the constructors in step)."""


def harness_name(name: str) -> str:
    """``name`` if it is a registered harness or a ``module:Class`` adapter path; else a ValueError that
    lists the registered names (and the nearest one)."""
    if name in HARNESS_OPTIONS or ":" in name:
        return name
    near = difflib.get_close_matches(name, list(HARNESS_OPTIONS), n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise ValueError(
        f"no harness named {name!r}; {hint}registered: {', '.join(sorted(HARNESS_OPTIONS))} (or a module:Class path)"
    )


class HarnessConfig(Section):
    """Which agent harness drives each rollout."""

    name: str = Field("lego-agent", description="A registered harness name (`lego harness list`).")
    weights: dict[str, float] = Field(
        default_factory=dict, description="Mixed-harness runs: harness name -> sampling weight. Empty: use `name`."
    )
    max_turns: int = Field(
        30, ge=1, description="Most model calls of the main conversation in one rollout (then max_turns)."
    )
    timeout_s: float = Field(600.0, gt=0, description="Wall time of one harness run.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-harness adapter settings, e.g. {lego-agent = {max_tokens = 256}}: each harness's are typed "
        "(harness.options.<name>.* in `lego config show --doc`) and checked at load; a module:Class harness's go "
        "to its constructor as given.",
    )

    @field_validator("name")
    @classmethod
    def _registered_name(cls, value: str) -> str:
        return harness_name(value)

    @field_validator("weights")
    @classmethod
    def _registered_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            harness_name(name)
        return value

    @field_validator("options")
    @classmethod
    def _typed_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Each registered harness's options become its typed model, so a misspelt key fails at load."""
        out: dict[str, Any] = {}
        for name, raw in value.items():
            model = HARNESS_OPTIONS.get(name)
            if model is None:
                if ":" in name:  # a user's own module:Class adapter: its constructor checks its options
                    out[name] = raw
                    continue
                raise ValueError(
                    f"no harness named {name!r}; valid names: {', '.join(sorted(HARNESS_OPTIONS))} "
                    "(or a module:Class path)"
                )
            if isinstance(raw, model):
                out[name] = raw
                continue
            if not isinstance(raw, dict):
                raise ValueError(f"{name!r} must be a table of options, e.g. {{max_tokens = 256}}")
            valid = ", ".join(model.model_fields) or "none"
            unknown = sorted(set(raw) - set(model.model_fields))
            if unknown:
                raise ValueError(f"{name!r} has no option(s) {', '.join(unknown)}; valid options: {valid}")
            try:
                out[name] = model.model_validate(raw)
            except ValidationError as exc:
                reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{name!r}: {reasons}") from exc
        return out

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor keyword arguments of harness ``name``'s adapter (its defaults when none are set)."""
        given = self.options.get(name)
        if isinstance(given, BaseModel):
            return given.model_dump()
        if given is not None:
            return dict(given)
        model = HARNESS_OPTIONS.get(name)
        return model().model_dump() if model is not None else {}


class TasksConfig(Section):
    """Where tasks come from."""

    source: str = Field(
        "builtin",
        description="'builtin' (eight libraries, issue-only reports), 'starter' (generated one-module repos with "
        "precise reports: the embedded default's suite), 'boundary' (the same repos with off-by-one bounds) or a "
        "path to a SWE-bench-format JSONL file.",
    )
    split: str = Field("train", description="Split to sample training tasks from.")
    eval_split: str = Field("heldout", description="Split used for validation.")
    limit: int | None = Field(
        None,
        ge=1,
        description="Train on the first N tasks of the split (after tasks.where), in the source's order: the "
        "rule of eval.limit and `lego eval --limit` too (lego.tasks.sources.pick_tasks). None: all.",
    )
    where: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Keep only the tasks whose metadata[KEY] is one of the listed values, in every split (training, "
        "validation, `lego eval`, `lego bench learn`), e.g. {mutation_kind = ['and -> or', 'or -> and']}: the starter "
        "suite's boolean-logic bugs, the skill the warm start lacks (README). Empty: every task.",
    )
    skip_bad_lines: bool = Field(
        False,
        description="Skip malformed lines of a JSONL task file (each reported) instead of stopping, before "
        "anything runs, with the first one's file:line.",
    )
    canary_rate: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="Impossible canary rollouts per training rollout (at least one a step when > 0): tasks of the "
        "split whose hidden tests are turned against their own bug report (lego.tasks.canary), so any pass is a hack. "
        "Never trained on; `hack/canary_pass_rate` in every step's metrics. 0: none.",
    )
    min_behavioural_evidence: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Train only on tasks whose FAIL_TO_PASS tests rest on witnessed behaviour at least this "
        "often (the share `lego tasks validate` prints): a test with nothing witnessed in the grader's blind copy "
        "rests on a pass/fail bit the code under test can forge (lego.sandboxes.blind). Measured once per task "
        "from the gold patch, before its first rollout; a task without a gold patch is kept. 0: keep all.",
    )

    def split_spec(self, split: str) -> str:
        """The task-source spec of ``split``: ``source:split``, or ``source`` as given when it names its own
        split (``tasks.jsonl:test``)."""
        if ":" in self.source and not self.source.endswith(":"):
            return self.source
        return f"{self.source}:{split}"
