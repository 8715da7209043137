"""Weight sync: after each update, the engine serves the new policy before the next rollouts.

In-process engine (``engine.kind = "transformers"``): :func:`sync_weights` hands the engine a
state-dict copy of the trainer's weights (LoRA merged in) through ``engine.load_weights``, which
loads them and bumps ``policy_version``.

A ``vllm serve`` endpoint (``engine.kind = "vllm"``), through vLLM's own HTTP API
(:class:`VLLMWeightSync`; the trainer writes files to a directory both machines see):

- ``mode="lora"`` — hot-load the adapter: write it to ``<shared>/adapters/<prefix>-v<N>``, then
  ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` and unload the previous one with
  ``POST /v1/unload_lora_adapter {"lora_name"}``. Requests then name the new adapter as their
  ``model``. vLLM must run with ``--enable-lora`` (and ``--max-lora-rank`` ≥ the rank) and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``.
- ``mode="full"`` — reload in place: vLLM serves the model directory ``<shared>`` itself
  (``vllm serve <shared> --served-model-name ...``); the trainer rewrites its safetensors (each file
  renamed into place), then ``POST /collective_rpc {"method": "reload_weights"}`` makes every worker
  re-read the weights from that directory (the model runner's ``reload_weights()`` with no iterator
  loads from the served model path; vLLM's own "skip loading weights" example uses the same call), and ``POST /reset_prefix_cache`` drops KV blocks computed
  with the old weights. ``/collective_rpc`` and ``/reset_prefix_cache`` are development endpoints:
  start vLLM with ``VLLM_SERVER_DEV_MODE=1``.

The version bump for a remote engine: the engine object gets ``set_served_model(name, version)``
when it has it; otherwise (``lego.engines.vllm.VLLMEngine``) its ``model`` (the name requests
send: the new adapter's in LoRA mode) and ``policy_version`` attributes are set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from lego.errors import EngineError, EngineUnavailableError

if TYPE_CHECKING:
    from lego.conductor.trainer import Trainer

__all__ = ["VLLMWeightSync", "sync_weights"]


class VLLMWeightSync:
    """Pushes a trainer's weights into a running ``vllm serve`` through its HTTP API.

    Args:
        base_url: the server root (``http://host:8000``; a trailing ``/v1`` is accepted).
        shared_dir: where this process writes weights; for ``mode="full"`` the directory vLLM serves.
        mode: ``"lora"`` (adapter hot-load) or ``"full"`` (reload all weights in place).
        remote_dir: ``shared_dir`` as the vLLM server sees it (default: the same path).
        served_model_name: the name requests use in full mode (vLLM's ``--served-model-name``).
        adapter_prefix: LoRA adapters are named ``<prefix>-v<version>``.
    """

    def __init__(
        self,
        base_url: str,
        shared_dir: str | Path,
        mode: Literal["lora", "full"],
        *,
        api_key: str | None = None,
        remote_dir: str | None = None,
        served_model_name: str = "lego-policy",
        adapter_prefix: str = "lego-policy",
        timeout_s: float = 600.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        root = base_url.rstrip("/")
        self.base_url = root[: -len("/v1")] if root.endswith("/v1") else root
        self.shared_dir = Path(shared_dir)
        self.remote_dir = remote_dir or str(self.shared_dir)
        self.mode = mode
        self.served_model_name = served_model_name
        self.adapter_prefix = adapter_prefix
        self.current_adapter: str | None = None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._client.close()

    def _post(self, path: str, json: dict[str, Any] | None = None, hint: str = "") -> httpx.Response:
        try:
            resp = self._client.post(path, json=json)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(
                f"cannot reach vLLM at {self.base_url}{path}: {exc}; is `vllm serve` running?"
            ) from exc
        if resp.status_code >= 400:
            extra = f"; {hint}" if hint and resp.status_code in (404, 405) else ""
            raise EngineError(f"vLLM {path} answered HTTP {resp.status_code}: {resp.text[:300]}{extra}")
        return resp

    def push(self, trainer: Trainer, version: int) -> str:
        """Write the weights and make vLLM serve them; returns the model name to request."""
        if self.mode == "lora":
            return self._push_lora(trainer, version)
        self._push_full(trainer)
        return self.served_model_name

    def _push_lora(self, trainer: Trainer, version: int) -> str:
        if trainer.train_cfg.finetune != "lora":
            raise EngineError("VLLMWeightSync(mode='lora') needs training.finetune='lora'; use mode='full' otherwise")
        if trainer.train_cfg.lora_modules_to_save:
            raise EngineError(
                "vLLM serves LoRA adapters on the linear layers only, so training.lora_modules_to_save "
                f"({trainer.train_cfg.lora_modules_to_save}) cannot travel as an adapter; use "
                "VLLMWeightSync(mode='full'), which pushes the merged weights"
            )
        name = f"{self.adapter_prefix}-v{version}"
        adapters = self.shared_dir / "adapters"
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
        remote = f"{self.remote_dir.rstrip('/')}/adapters/{name}"
        self._post(
            "/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": remote},
            hint="start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
        )
        previous, self.current_adapter = self.current_adapter, name
        if previous and previous != name:
            self._post("/v1/unload_lora_adapter", {"lora_name": previous})
            shutil.rmtree(adapters / previous, ignore_errors=True)
        return name

    def _push_full(self, trainer: Trainer) -> None:
        state = trainer.engine_state_dict()
        self.shared_dir.mkdir(parents=True, exist_ok=True)
        base = trainer.model.get_base_model() if trainer.train_cfg.finetune == "lora" else trainer.model  # type: ignore[operator]
        staging = Path(tempfile.mkdtemp(prefix=".weights.", dir=self.shared_dir))
        try:
            base.save_pretrained(staging, state_dict=state, safe_serialization=True)  # type: ignore[operator]
            new = {
                p.name
                for p in staging.iterdir()
                if p.suffix == ".safetensors" or p.name.endswith(".safetensors.index.json")
            }
            for name in sorted(new):
                os.replace(staging / name, self.shared_dir / name)
            if not (self.shared_dir / "config.json").exists():
                os.replace(staging / "config.json", self.shared_dir / "config.json")
            for stale in self.shared_dir.glob("*.safetensors*"):
                if stale.name not in new:
                    stale.unlink()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._post(
            "/collective_rpc",
            {"method": "reload_weights", "args": [], "kwargs": {}},
            hint="start vLLM with VLLM_SERVER_DEV_MODE=1 (it enables /collective_rpc) and serve the shared directory",
        )
        self._post("/reset_prefix_cache", hint="start vLLM with VLLM_SERVER_DEV_MODE=1")


def sync_weights(trainer: Trainer, engine: Any, vllm: VLLMWeightSync | None = None) -> int:
    """Make ``engine`` serve the trainer's current weights; returns the new policy version.

    Without ``vllm``: ``engine.load_weights(trainer.engine_state_dict())`` (the engine bumps its
    version). With it: push through vLLM's API, then tell the engine the new name and version."""
    if vllm is None:
        return int(engine.load_weights(trainer.engine_state_dict()))
    version = int(getattr(engine, "policy_version", 0)) + 1
    name = vllm.push(trainer, version)
    setter = getattr(engine, "set_served_model", None)
    if callable(setter):
        setter(name, version)
    else:  # lego.engines.vllm.VLLMEngine: requests name ``engine.model``; generations record the version
        if isinstance(getattr(engine, "model", None), str):
            engine.model = name
        engine.policy_version = version
    return version
