"""Weight delivery: after each update, the engine serves the new policy before the next rollouts.

One seam, :class:`WeightSync` (``push(trainer) -> version``), built by :func:`build_weight_sync`
from ``engine.kind`` (and, for vLLM, ``engine.vllm_weight_sync``); the loop never asks which:

- ``transformers`` -> :class:`InProcessCopy`: ``engine.load_weights`` gets a state-dict copy of
  the trainer's weights (LoRA merged in); the engine loads them between batches and bumps its version.
- ``vllm`` + ``full`` -> :class:`VLLMFullReload`: vLLM serves the model directory
  ``engine.vllm_weights_dir`` itself (``vllm serve <dir> --served-model-name ...``); the trainer
  rewrites its safetensors (each file renamed into place), then ``POST /collective_rpc
  {"method": "reload_weights"}`` makes every worker re-read the weights from that directory (the
  model runner's ``reload_weights()`` with no iterator loads from the served model path), and
  ``POST /reset_prefix_cache`` drops KV blocks computed with the old weights. Both are development
  endpoints: start vLLM with ``VLLM_SERVER_DEV_MODE=1``.
- ``vllm`` + ``lora`` -> :class:`VLLMLoraHotLoad`: the adapter is written to
  ``<dir>/adapters/<prefix>-v<N>``, then ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}``
  and the previous one is dropped with ``POST /v1/unload_lora_adapter {"lora_name"}``; requests then
  name the new adapter as their ``model``. vLLM must run with ``--enable-lora`` (``--max-lora-rank``
  >= the rank) and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``.
- ``oracle`` never trains: building its sync is refused.

The endpoints and bodies are those of vLLM 0.10.x's OpenAI server (``vllm/entrypoints/openai/
api_server.py``: ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``, and under
``VLLM_SERVER_DEV_MODE`` ``/collective_rpc`` and ``/reset_prefix_cache``). After vLLM serves the
new weights the engine learns the name to request and the new version (``VLLMEngine.serve``).

Each delivery holds the engine's capability it needs (``lego.seams``): ``in_process_weights`` for the
copy, ``served_weights`` for vLLM; an engine without it is refused when the sync is built.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from lego.config import EngineConfig
from lego.errors import ConfigError, EngineError, EngineUnavailableError
from lego.seams import Engine, InProcessWeights, ServedWeights

if TYPE_CHECKING:
    from lego.training.trainer import Trainer

__all__ = ["InProcessCopy", "VLLMFullReload", "VLLMLoraHotLoad", "WeightSync", "build_weight_sync"]


class WeightSync(Protocol):
    """Makes the engine serve the trainer's current weights."""

    def push(self, trainer: Trainer) -> int:
        """Deliver the weights; returns the policy version the engine now serves."""
        ...

    def close(self) -> None: ...


class InProcessCopy:
    """An in-process engine: a state-dict copy of the trainer's weights through ``load_weights``."""

    def __init__(self, engine: InProcessWeights) -> None:
        self.engine = engine

    def push(self, trainer: Trainer) -> int:
        return self.engine.load_weights(trainer.engine_state_dict())

    def close(self) -> None:
        return None


class _VLLMAdmin:
    """The weight routes of a `vllm serve` (a synchronous client: the loop pushes between steps,
    while the engine's async client lives on the proxy's event loop)."""

    def __init__(
        self, engine: ServedWeights, weights_dir: str | Path, remote_dir: str | None, timeout_s: float
    ) -> None:
        self.engine = engine
        self.weights_dir = Path(weights_dir)
        self.remote_dir = (remote_dir or str(self.weights_dir)).rstrip("/")
        headers = {"authorization": f"Bearer {engine.api_key}"} if engine.api_key else {}
        self._client = httpx.Client(base_url=engine.base_url, headers=headers, timeout=timeout_s)

    def post(self, path: str, json: dict[str, Any] | None = None, hint: str = "") -> httpx.Response:
        try:
            resp = self._client.post(path, json=json)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(
                f"cannot reach vLLM at {self.engine.base_url}{path}: {exc}; is `vllm serve` running?"
            ) from exc
        if resp.status_code >= 400:
            extra = f"; {hint}" if hint and resp.status_code in (404, 405) else ""
            raise EngineError(f"vLLM {path} answered HTTP {resp.status_code}: {resp.text[:300]}{extra}")
        return resp

    def close(self) -> None:
        self._client.close()


class VLLMFullReload(_VLLMAdmin):
    """Rewrite the safetensors of the directory vLLM serves, then have vLLM reload them."""

    def push(self, trainer: Trainer) -> int:
        state = trainer.engine_state_dict()
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        base = trainer.model.get_base_model() if trainer.train_cfg.finetune == "lora" else trainer.model  # type: ignore[operator]
        staging = Path(tempfile.mkdtemp(prefix=".weights.", dir=self.weights_dir))
        try:
            base.save_pretrained(staging, state_dict=state, safe_serialization=True)  # type: ignore[operator]
            new = {
                p.name
                for p in staging.iterdir()
                if p.suffix == ".safetensors" or p.name.endswith(".safetensors.index.json")
            }
            # each file renamed into place: a reader never sees a half-written shard
            for name in sorted(new):
                os.replace(staging / name, self.weights_dir / name)
            if not (self.weights_dir / "config.json").exists():
                os.replace(staging / "config.json", self.weights_dir / "config.json")
            for stale in self.weights_dir.glob("*.safetensors*"):
                if stale.name not in new:
                    stale.unlink()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.post(
            "/collective_rpc",
            {"method": "reload_weights", "args": [], "kwargs": {}},
            hint="start vLLM with VLLM_SERVER_DEV_MODE=1 (it enables /collective_rpc) on engine.vllm_weights_dir",
        )
        self.post("/reset_prefix_cache", hint="start vLLM with VLLM_SERVER_DEV_MODE=1")
        version = self.engine.policy_version + 1
        self.engine.serve(self.engine.model, version)
        return version


class VLLMLoraHotLoad(_VLLMAdmin):
    """Write the LoRA adapter, hot-load it under a new name, drop the previous one."""

    def __init__(
        self,
        engine: ServedWeights,
        weights_dir: str | Path,
        remote_dir: str | None,
        timeout_s: float,
        adapter_prefix: str = "lego-policy",
    ) -> None:
        super().__init__(engine, weights_dir, remote_dir, timeout_s)
        self.adapter_prefix = adapter_prefix
        self.current_adapter: str | None = None

    def push(self, trainer: Trainer) -> int:
        cfg = trainer.train_cfg
        if cfg.finetune != "lora":
            raise ConfigError(
                "engine.vllm_weight_sync='lora' needs training.finetune='lora'; or set engine.vllm_weight_sync='full'"
            )
        if cfg.lora_modules_to_save:
            raise ConfigError(
                "vLLM serves LoRA adapters on the linear layers only, so training.lora_modules_to_save "
                f"({cfg.lora_modules_to_save}) cannot travel as an adapter; set engine.vllm_weight_sync='full', "
                "which pushes the merged weights"
            )
        version = self.engine.policy_version + 1
        name = f"{self.adapter_prefix}-v{version}"
        adapters = self.weights_dir / "adapters"
        adapters.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=adapters))
        try:
            trainer.model.save_pretrained(tmp)  # type: ignore[operator]
            final = adapters / name
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.post(
            "/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": f"{self.remote_dir}/adapters/{name}"},
            hint="start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
        )
        self.engine.serve(name, version)
        previous, self.current_adapter = self.current_adapter, name
        if previous and previous != name:
            self.post("/v1/unload_lora_adapter", {"lora_name": previous})
            shutil.rmtree(adapters / previous, ignore_errors=True)
        return version


def build_weight_sync(cfg: EngineConfig, engine: Engine) -> WeightSync:
    """The weight delivery for the engine ``cfg`` built (``lego.engines.build_engine(cfg)``)."""
    caps = engine.capabilities
    if cfg.kind == "transformers":
        if caps.in_process_weights is None:  # the factory built it from the same cfg: a caller mixed configs
            raise ConfigError(
                f"engine.kind='transformers' but the {type(engine).__name__} engine takes no in-process "
                "weights; build it from the same config"
            )
        return InProcessCopy(caps.in_process_weights)
    if cfg.kind == "oracle":
        raise ConfigError(
            "engine.kind='oracle' proves harness integration and never trains; train with "
            "engine.kind='transformers' or 'vllm'"
        )
    served = caps.served_weights
    if served is None:  # the factory built it from the same cfg: a caller mixed configs
        raise ConfigError(
            f"engine.kind='vllm' but the engine is a {type(engine).__name__}; build it from the same config"
        )
    if not cfg.vllm_weights_dir:
        raise ConfigError(
            "training on engine.kind='vllm' needs engine.vllm_weights_dir: the directory `vllm serve` was started on "
            "(vllm_weight_sync='full') or where adapters are written (='lora'), visible to both machines"
        )
    if cfg.vllm_weight_sync == "lora":
        return VLLMLoraHotLoad(served, cfg.vllm_weights_dir, cfg.vllm_weights_dir_remote, cfg.request_timeout_s)
    return VLLMFullReload(served, cfg.vllm_weights_dir, cfg.vllm_weights_dir_remote, cfg.request_timeout_s)
