"""A deterministic stand-in for the rollout, for runner/report tests (the real one needs a policy,
a harness and a sandbox; the runner's job — concurrency, resume, retries, bookkeeping — does not).

Each sample's outcome is a pure function of its key: pass with a per-(policy, harness) rate drawn
from the key's seed, a fixed set of keys that fail transiently once (retried) and a fixed set that
always fail as infrastructure. Every call is appended to ``$LEGO_TEST_CALLS_LOG`` when set, so tests
can check which samples a (re)run actually executed. ``$LEGO_TEST_SAMPLE_SLEEP`` slows each call.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from lego.config import LegoConfig
from lego.eval.results import EvalSpec, SampleKey, SampleResult
from lego.io import append_jsonl
from lego.types import Task

RATES = {"oracle": 1.0, "base": 0.3, "rl": 0.6}


def _u(key: SampleKey, salt: str) -> float:
    """A uniform number in [0, 1) from the key (no hidden state)."""
    h = hashlib.sha256(f"{salt}|{key.policy}|{key.harness}|{key.task_id}|{key.sample}|{key.seed}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def permanent_infra(key: SampleKey) -> bool:
    return key.policy != "oracle" and _u(key, "infra") < 0.05


def transient_infra(key: SampleKey) -> bool:
    return _u(key, "flaky") < 0.1


def factory(spec: EvalSpec, tasks: Mapping[str, Task], out_dir: Path, cfg: LegoConfig):  # type: ignore[no-untyped-def]
    seen: set[SampleKey] = set()
    lock = threading.Lock()
    log = os.environ.get("LEGO_TEST_CALLS_LOG")
    sleep = float(os.environ.get("LEGO_TEST_SAMPLE_SLEEP", "0"))

    def run_sample(key: SampleKey) -> SampleResult:
        assert key.task_id in tasks
        if log:
            append_jsonl(log, key.model_dump())
        time.sleep(sleep)
        with lock:
            first = key not in seen
            seen.add(key)
        if permanent_infra(key):
            return SampleResult.infra_failure(key, "sandbox could not start", attempts=1, label="env_error")
        if first and transient_infra(key):
            raise RuntimeError("harness crashed before its first request")
        rate = RATES.get(key.policy, 0.5) - (0.1 if key.harness.endswith("2") and key.policy != "oracle" else 0.0)
        passed = _u(key, "pass") < rate
        return SampleResult(
            key=key,
            passed=passed,
            reward=1.0 if passed else 0.0,
            termination="completed" if _u(key, "term") < 0.8 else "max_turns",
            turns=1 + int(10 * _u(key, "turns")),
            prompt_tokens=1000 + int(500 * _u(key, "pt")),
            completion_tokens=100 + int(200 * _u(key, "ct")),
            wall_s=round(5 + 10 * _u(key, "wall"), 3),
            guard_flags={"test_tamper": _u(key, "guard") < 0.1, "history_dig": False},
        )

    return run_sample
