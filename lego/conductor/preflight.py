"""Checks a command runs before it spends any compute: the choices a user makes that would otherwise
surface as every rollout failing, or as a traceback after a minute of loading.

Each check raises :class:`~lego.errors.ConfigError` with one line that names the field (or flag)
and the fix; the CLI prints it and exits 2. Only light modules are imported here (no torch, no
transformers), so a mistake is reported in about the time `lego --help` takes. What is checked:

- a harness is registered (:func:`lego.config.environment.harness_name`) and, when it is installed
  separately, installed (`lego harness install NAME`);
- a model is a built-in name or a model directory (a ``config.json``), and not a training run's
  directory (whose checkpoints are under ``checkpoints/``);
- a task source loads and its split holds tasks (``tasks.source``; ``serve.learn_heldout`` with
  ``lego serve --learn``, with its harness and sandbox: :func:`check_serve_learn`);
- the sandbox backend can start here (bubblewrap for ``local``, a Docker engine for ``docker``);
- under ``torchrun`` (``WORLD_SIZE > 1``), that torchrun started the ranks and that the run's
  settings suit a trainer sharded over them (:func:`check_ranks`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from lego.config import LegoConfig
from lego.errors import ConfigError, TaskError

__all__ = [
    "BUILT_IN_MODELS",
    "check_harness",
    "check_model",
    "check_ranks",
    "check_sandbox",
    "check_serve_learn",
    "check_tasks",
    "check_train",
]

BUILT_IN_MODELS = ("default", "tiny")
"""Model names that are no directory: the embedded default and the random-weight tiny model."""


def check_harness(name: str, field: str) -> None:
    """``name`` is a registered harness ready to run here (module:Class adapters are the user's own)."""
    from lego.config.environment import harness_name

    try:
        harness_name(name)
    except ValueError as exc:
        raise ConfigError(f"{field}: {exc}") from exc
    if ":" in name:
        return
    from lego.harnesses.base import install_spec_of
    from lego.harnesses.install import installed

    spec = install_spec_of(name)
    if spec is not None and installed(name) is None:
        raise ConfigError(
            f"{field}: harness {name!r} is not installed here; run `lego harness install {name}` "
            f"(pins {spec.package}=={spec.version}), or pick another (`lego harness list`)"
        )


def check_model(model: str, field: str) -> None:
    """``model`` names something the in-process engine can load."""
    if model in BUILT_IN_MODELS:
        return
    path = Path(model).expanduser()
    if path.is_dir() and (path / "checkpoints").is_dir() and not (path / "config.json").exists():
        latest = path / "checkpoints" / "latest"
        hint = latest if latest.exists() else path / "checkpoints" / "step_NNNNNN"
        raise ConfigError(
            f"{field}: {model} is a training run's directory, not a checkpoint; give one of its checkpoints, "
            f"e.g. {hint} (or `lego eval --from-run {model}`)"
        )
    if not path.is_dir():
        raise ConfigError(
            f"{field}: {model!r} is not a directory; give a model or checkpoint directory (HF layout), "
            f"or one of {', '.join(BUILT_IN_MODELS)}"
        )
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{field}: {model} holds no config.json, so it is not a Hugging Face model directory "
            "(a GGUF file? `lego models import`)"
        )


def check_tasks(source: str, field: str) -> None:
    """``source`` (``NAME[:split]``) loads and holds tasks."""
    from lego.tasks.sources import load_source

    try:
        records = load_source(source).records()
    except TaskError as exc:
        raise ConfigError(f"{field}: {' '.join(str(exc).split())}") from exc
    if not records:
        raise ConfigError(f"{field}: {source!r} holds no tasks; `lego tasks list {source}` shows what it has")


def check_sandbox(kind: str, unsafe_no_isolation: bool) -> None:
    """The sandbox backend ``kind`` can start on this machine."""
    if kind == "docker":
        docker = shutil.which("docker")
        ok = docker is not None and _answers([docker, "info", "--format", "{{.ServerVersion}}"])
        if not ok:
            raise ConfigError(
                "sandbox.kind: 'docker' but no Docker engine answers here; start one (dockerd) or use "
                "sandbox.kind=local (`lego doctor` shows what this machine has)"
            )
    elif not unsafe_no_isolation and shutil.which("bwrap") is None:
        raise ConfigError(
            "sandbox.kind: 'local' needs bubblewrap, which is missing; apt-get install bubblewrap "
            "(or --unsafe-no-isolation on a disposable machine)"
        )


def _answers(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def check_ranks(cfg: LegoConfig, env: Mapping[str, str] = os.environ) -> None:
    """Under ``torchrun`` (``WORLD_SIZE > 1`` in ``env``): the ranks were started by torchrun, and
    the trainer's weights can leave its FSDP2 shards for the engine and the checkpoints."""
    try:
        world = int(env.get("WORLD_SIZE", "1") or "1")
    except ValueError:
        raise ConfigError(f"WORLD_SIZE={env['WORLD_SIZE']!r} is not a number; let torchrun set it") from None
    if world <= 1:
        return
    missing = [k for k in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        raise ConfigError(
            f"WORLD_SIZE={world} is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not, so "
            "no process group can start: run the ranks with `torchrun --standalone --nproc-per-node N -m lego "
            "train ...`, or unset WORLD_SIZE to train in one process"
        )
    if cfg.training.finetune == "lora":
        raise ConfigError(
            f"training.finetune: 'lora' with {world} ranks: the sharded trainer gathers full weights, not a LoRA "
            "adapter, for the engine and the checkpoints; set -o training.finetune=full under torchrun, or "
            "train the adapter in one process"
        )
    if cfg.engine.kind == "oracle":
        raise ConfigError(
            "engine.kind: 'oracle' never trains, so there is no trainer to shard over ranks; train with "
            "engine.kind='transformers' or 'vllm', or run `lego train` in one process"
        )


def check_train(cfg: LegoConfig) -> None:
    """Everything `lego train` is about to use, before the policy loads."""
    check_ranks(cfg)
    harnesses: Iterable[tuple[str, str]] = (
        [(name, "harness.weights") for name in cfg.harness.weights]
        if cfg.harness.weights
        else [(cfg.harness.name, "harness.name")]
    )
    for name, field in harnesses:
        check_harness(name, field)
    if cfg.training.eval_every:
        for name in cfg.eval.harnesses[:1]:
            check_harness(name, "eval.harnesses")
    if cfg.engine.kind != "vllm":
        check_model(cfg.engine.model, "engine.model")
    source = cfg.tasks.source
    check_tasks(source if ":" in source and not source.endswith(":") else f"{source}:{cfg.tasks.split}", "tasks.source")
    check_sandbox(cfg.sandbox.kind, cfg.sandbox.unsafe_no_isolation)


def check_serve_learn(cfg: LegoConfig) -> None:
    """What `lego serve --learn` is about to use besides the model: the held-out check's tasks
    (``serve.learn_heldout``), its harness and its sandbox backend, when the check is configured."""
    source = cfg.serve.learn_heldout
    if source is None:
        return
    check_tasks(source, "serve.learn_heldout")
    check_harness(cfg.eval.harnesses[0], "eval.harnesses")
    check_sandbox(cfg.sandbox.kind, cfg.sandbox.unsafe_no_isolation)
