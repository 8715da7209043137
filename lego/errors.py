"""The one exception hierarchy of lego.

    LegoError                      base: every error lego raises on purpose
    ├── ConfigError                a config file, override or CLI option is invalid (CLI exit 2)
    ├── TaskError                  a task file or task record is malformed or its repo is missing (exit 2)
    ├── ModelError                 a model directory cannot be loaded or built (exit 2)
    ├── ChatFormatError            messages cannot be rendered with the chat template
    ├── ContextOverflowError       a prompt (plus max_tokens) does not fit the model context
    ├── EngineError                the engine failed to generate (retryable unless said otherwise)
    │   └── EngineUnavailableError the engine cannot be reached / is shutting down
    ├── SandboxError               a sandbox could not be created or a command could not run
    ├── HarnessError               a harness could not be installed, prepared or launched
    ├── GradingError               grading infrastructure failed (not the agent's patch)
    ├── FidelityError              the rollout-train fidelity gate tripped
    ├── RolloutsFailedError        every rollout of a training step failed on infrastructure
    ├── RankFailedError            under torchrun, a follower rank of the trainer died mid-run
    └── ResumeError                a run directory cannot be resumed with this config

A user-facing message says what happened and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "ChatFormatError",
    "ConfigError",
    "ContextOverflowError",
    "EngineError",
    "EngineUnavailableError",
    "FidelityError",
    "GradingError",
    "HarnessError",
    "LegoError",
    "ModelError",
    "RankFailedError",
    "ResumeError",
    "RolloutsFailedError",
    "SandboxError",
    "TaskError",
]


class LegoError(Exception):
    """Base class of every error lego raises on purpose."""


class ConfigError(LegoError):
    """A config file, dotted override or CLI option is invalid; the message names the field and the fix."""


class TaskError(LegoError):
    """A task file or task record is malformed, or the repository it needs is missing."""


class ModelError(LegoError):
    """A model directory cannot be loaded or built."""


class ChatFormatError(LegoError):
    """Messages or tools cannot be rendered with the model's chat template."""


class ContextOverflowError(LegoError):
    """The prompt plus the requested completion does not fit the model's context window.

    Not retryable: the same request will overflow again. The proxy maps it to HTTP 400.
    """

    def __init__(self, prompt_tokens: int, max_tokens: int, context_window: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context_window = context_window
        super().__init__(
            f"prompt of {prompt_tokens} tokens leaves no room in the model's context window of "
            f"{context_window} tokens (asked for up to {max_tokens} new tokens); shorten the "
            "conversation or lower max_tokens"
        )


class EngineError(LegoError):
    """The engine failed to produce a generation."""

    retryable: bool = True


class EngineUnavailableError(EngineError):
    """The engine cannot be reached or is shutting down."""


class SandboxError(LegoError):
    """A sandbox could not be created, or a command could not be started in it."""


class HarnessError(LegoError):
    """A harness could not be installed, prepared or launched."""


class GradingError(LegoError):
    """Grading infrastructure failed; the agent's patch is not to blame."""


class FidelityError(LegoError):
    """The rollout-train probability correlation stayed below the configured floor."""


class RolloutsFailedError(LegoError):
    """Every rollout of a training step failed on infrastructure (harness, sandbox, grading), none
    because of the policy: the run stops instead of training on nothing and checkpointing that."""


class RankFailedError(LegoError):
    """Under ``torchrun``, a follower rank (a shard of the trainer) died or stopped answering: no
    further update can run, so rank 0 stops instead of waiting for it. ``rank`` is the lost rank
    (None when it cannot be told apart), ``saved_step`` the last step with a checkpoint."""

    def __init__(self, rank: int | None, saved_step: int, detail: str = "") -> None:
        self.rank = rank
        self.saved_step = saved_step
        who = f"rank {rank}" if rank is not None else "a follower rank"
        saved = f"step {saved_step} is saved" if saved_step else "no step is saved yet"
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"{who} of the trainer is gone{why}, so no further update can run; {saved}: run the same "
            "torchrun command again with `--resume` to continue from it (check that rank's log for why it died)"
        )


class ResumeError(LegoError):
    """A run directory cannot be resumed with the given config."""
