"""Weight sync: in-process into a real engine-like holder, and vLLM's HTTP API against a fake
`vllm serve` (a real starlette app on loopback) that pins the request shapes vLLM documents."""

import json
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from transformers import AutoModelForCausalLM

from lego.conductor.trainer import Trainer
from lego.conductor.weight_sync import VLLMWeightSync, sync_weights
from lego.errors import EngineError, EngineUnavailableError


class InProcessEngine:
    """The in-process engine's weight-loading contract: load a state dict, bump the version."""

    def __init__(self, model_dir):
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.policy_version = 0

    def load_weights(self, state_dict):
        self.model.load_state_dict(dict(state_dict))
        self.policy_version += 1
        return self.policy_version


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_in_process_sync_makes_engine_serve_the_trained_policy(model_dir, items, make_config, finetune):
    kw = {"finetune": "lora", "lora_rank": 4, "lora_alpha": 8.0, "lr": 1e-2} if finetune == "lora" else {}
    trainer = Trainer(model_dir, make_config(**kw))
    engine = InProcessEngine(model_dir)
    trainer.step(items)
    trainer.step(items)
    assert sync_weights(trainer, engine) == 1
    # the engine now computes what the trainer computes
    with torch.no_grad():
        s = items[0].segment
        logits = engine.model(input_ids=torch.tensor([s.input_ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        p = len(s.prompt_ids)
        engine_lp = [float(lp[p - 1 + j, t]) for j, t in enumerate(s.response_ids)]
    assert trainer.recompute([items[0]])[0] == pytest.approx(engine_lp, abs=1e-5)


class FakeVLLM:
    """Records requests; answers like vLLM's server (200 + text/JSON, or an error status)."""

    def __init__(self, fail: dict[str, int] | None = None):
        self.requests: list[tuple[str, dict, dict]] = []
        self.fail = fail or {}
        self.seen_files: dict[str, list[str]] = {}

        async def handler(request: Request):
            path = request.url.path
            body = await request.body()
            payload = json.loads(body) if body else {}
            self.requests.append((path, payload, dict(request.headers)))
            if path in self.fail:
                return PlainTextResponse("Not Found", status_code=self.fail[path])
            if path == "/v1/load_lora_adapter":
                d = Path(payload["lora_path"])
                self.seen_files[payload["lora_name"]] = sorted(p.name for p in d.iterdir())
                return PlainTextResponse(f"Success: LoRA adapter '{payload['lora_name']}' added successfully.")
            if path == "/v1/unload_lora_adapter":
                return PlainTextResponse(f"Success: LoRA adapter '{payload['lora_name']}' removed successfully.")
            if path == "/collective_rpc":
                return JSONResponse({"results": [None]})
            return PlainTextResponse("", status_code=200)

        routes = [
            Route(p, handler, methods=["POST"])
            for p in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/collective_rpc", "/reset_prefix_cache")
        ]
        self.app = Starlette(routes=routes)

    def __enter__(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(5)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


class RemoteEngine:
    def __init__(self):
        self.policy_version = 0
        self.served = None

    def set_served_model(self, name, version):
        self.served, self.policy_version = name, version


def test_vllm_lora_hot_load_request_shapes(model_dir, items, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config(finetune="lora", lora_rank=4, lora_alpha=8.0))
    engine = RemoteEngine()
    with FakeVLLM() as server:
        sync = VLLMWeightSync(server.url + "/v1", tmp_path, "lora", api_key="sk-test")
        assert sync_weights(trainer, engine, sync) == 1
        trainer.step(items)
        assert sync_weights(trainer, engine, sync) == 2
        sync.close()
    assert engine.served == "lego-policy-v2" and engine.policy_version == 2
    paths = [(p, b) for p, b, _ in server.requests]
    assert paths == [
        ("/v1/load_lora_adapter", {"lora_name": "lego-policy-v1", "lora_path": f"{tmp_path}/adapters/lego-policy-v1"}),
        ("/v1/load_lora_adapter", {"lora_name": "lego-policy-v2", "lora_path": f"{tmp_path}/adapters/lego-policy-v2"}),
        ("/v1/unload_lora_adapter", {"lora_name": "lego-policy-v1"}),
    ]
    assert all(h["authorization"] == "Bearer sk-test" for _, _, h in server.requests)
    # the adapter was complete on disk when vLLM was told to load it
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(server.seen_files["lego-policy-v2"])
    assert not (tmp_path / "adapters" / "lego-policy-v1").exists()


def test_vllm_full_reload_writes_weights_then_reloads(model_dir, items, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    trainer.step(items)
    served = tmp_path / "served"
    engine = RemoteEngine()
    with FakeVLLM() as server:
        sync = VLLMWeightSync(server.url, served, "full", remote_dir="/mnt/policy")
        assert sync_weights(trainer, engine, sync) == 1
    assert [(p, b) for p, b, _ in server.requests] == [
        ("/collective_rpc", {"method": "reload_weights", "args": [], "kwargs": {}}),
        ("/reset_prefix_cache", {}),
    ]
    assert engine.served == "lego-policy"
    loaded = AutoModelForCausalLM.from_pretrained(served).state_dict()
    sd = trainer.model.state_dict()
    assert all(torch.equal(v, sd[k]) for k, v in loaded.items())
    assert not [p for p in served.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_vllm_errors_name_the_fix(model_dir, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    with FakeVLLM(fail={"/collective_rpc": 404}) as server:
        sync = VLLMWeightSync(server.url, tmp_path, "full")
        with pytest.raises(EngineError, match=r"HTTP 404.*VLLM_SERVER_DEV_MODE=1"):
            sync.push(trainer, 1)
    lora = VLLMWeightSync("http://127.0.0.1:9", tmp_path, "lora")
    with pytest.raises(EngineError, match=r"needs training\.finetune='lora'"):
        lora.push(trainer, 1)
    normed = Trainer(model_dir, make_config(finetune="lora", lora_rank=4, lora_modules_to_save=["norm"]))
    with pytest.raises(EngineError, match=r"lora_modules_to_save.*mode='full'"):
        lora.push(normed, 1)
    dead = VLLMWeightSync("http://127.0.0.1:9", tmp_path, "full", timeout_s=2)
    with pytest.raises(EngineUnavailableError, match="cannot reach vLLM"):
        dead.push(trainer, 1)
