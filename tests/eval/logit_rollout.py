"""A one-token stand-in for the rollout that samples from a real model, for the temperature-sweep tests.

Each task is a fixed prompt of token ids (a hash of its id); a sample is the model's next token drawn
at the spec's temperature by the Gumbel-max trick with noise seeded by ``key.seed``, so two policies
(and two temperatures) see the same noise for the same (task, sample): logits scaled by c at
temperature T give exactly the token the unscaled logits give at T / c. A sample passes when its
token is in the task's answer set: ranks ``ANSWER_RANKS`` of the *start* policy's next-token
distribution (the model ``$LEGO_TEST_ANSWER_MODEL`` names, else the spec's first policy: a confirm
stage's spec may hold only the trained policy), never the top token, so pass@1 rises and then falls with the
temperature, as an agent's does (too cold repeats one wrong move, too hot loses the thread).

Every call is appended to ``$LEGO_TEST_CALLS_LOG`` when set.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path

import torch

from lego.config import LegoConfig
from lego.eval.results import EvalSpec, SampleKey, SampleResult
from lego.io import append_jsonl
from lego.types import Task

ANSWER_RANKS = range(1, 32)
PROMPT_LEN = 12

_lock = threading.Lock()
_logits: dict[tuple[str, str], torch.Tensor] = {}


def task_prompt(task_id: str, vocab: int) -> list[int]:
    digest = hashlib.sha256(task_id.encode()).digest()
    return [3 + digest[i] * 7 % (vocab - 3) for i in range(PROMPT_LEN)]


def next_token_logits(model_dir: str, task_id: str) -> torch.Tensor:
    """The model's float64 logits after the task's prompt (cached per model and task)."""
    from transformers import AutoModelForCausalLM

    with _lock:
        if (model_dir, task_id) not in _logits:
            model = AutoModelForCausalLM.from_pretrained(model_dir)
            ids = torch.tensor([task_prompt(task_id, model.config.vocab_size)])
            with torch.no_grad():
                _logits[(model_dir, task_id)] = model(input_ids=ids).logits[0, -1].double()
        return _logits[(model_dir, task_id)]


def factory(spec: EvalSpec, tasks: Mapping[str, Task], out_dir: Path, cfg: LegoConfig):  # type: ignore[no-untyped-def]
    start = os.environ.get("LEGO_TEST_ANSWER_MODEL") or spec.policies[0].model
    log = os.environ.get("LEGO_TEST_CALLS_LOG")

    def run_sample(key: SampleKey) -> SampleResult:
        assert key.task_id in tasks
        if log:
            append_jsonl(log, {**key.model_dump(), "temperature": spec.temperature})
        answer = torch.argsort(next_token_logits(start, key.task_id), descending=True)[list(ANSWER_RANKS)]
        logits = next_token_logits(spec.policy(key.policy).model, key.task_id)
        uniform = torch.rand(logits.shape, generator=torch.Generator().manual_seed(key.seed), dtype=torch.float64)
        gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-300)))
        token = int(torch.argmax(logits / spec.temperature + gumbel))
        passed = token in set(answer.tolist())
        return SampleResult(key=key, passed=passed, reward=float(passed), turns=1, completion_tokens=1)

    return run_sample
