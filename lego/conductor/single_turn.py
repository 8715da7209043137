"""Single-turn RL through the real lego stack: prompts → proxy → segments → reward → update → sync.

The agentic loop (:mod:`lego.conductor.loop`) puts a sandbox and a harness between the proxy and the
policy. Single-turn mode drops both: each rollout is ONE chat completion sent over real HTTP to a
proxy session, so what the trainer sees is exactly what the proxy recorded (token ids, engine
logprobs, mask) — the same path an agent's calls take, minus the agent. It is what `lego bench
trainer` races against TRL's ``GRPOTrainer`` and a quick way to check the optimisation end to end.

    loop = SingleTurnLoop(trainer, engine, server, reward_fn=len, group_size=4, max_tokens=64)
    result = loop.step([[{"role": "user", "content": "Say something."}], ...])   # B prompts
    result.metrics["actor/pg_loss"], result.rewards, engine.policy_version

One :meth:`SingleTurnLoop.step`:

1. for every prompt, ``group_size`` proxy sessions (training mode: the proxy samples at the run's
   temperature with no truncation, whatever the request asks) each get one
   ``POST /s/{session}/v1/chat/completions``, all in flight at once so the engine batches them;
2. each session's :class:`~lego.types.Trajectory` is read back; ``reward_fn(completion text)``
   gives its reward; the prompt index is its group (``task_id``);
3. :func:`~lego.training.items.items_from_trajectories` → group-normalised advantages →
   :meth:`Trainer.step <lego.training.trainer.Trainer.step>` (GSPO loss, fidelity gate, AdamW);
4. :class:`~lego.training.weight_sync.InProcessCopy` makes the engine serve the new weights.

Sessions are closed after their trajectory is read, so a long run holds no growing state. The
HTTP client and its event loop live as long as the loop object (:meth:`SingleTurnLoop.close`, or
use it as a context manager): building an ``httpx.AsyncClient`` loads the CA bundle for its SSL
context, ~80 ms on a busy 2-core machine, which per step would be a few percent of a tiny-model step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from lego.errors import EngineError
from lego.proxies.server import ProxyServer
from lego.seams import Engine
from lego.training.items import TrainItem, items_from_trajectories
from lego.training.trainer import Trainer
from lego.training.weight_sync import InProcessCopy
from lego.types import SamplingOverride, SessionSpec, Trajectory

__all__ = ["RewardFn", "SingleTurnLoop", "SingleTurnStep"]

RewardFn = Callable[[str], float]
"""Reward of one completion from its text (the assistant message content)."""

Messages = list[dict[str, Any]]


@dataclass
class SingleTurnStep:
    """What one :meth:`SingleTurnLoop.step` did, in prompt-major order (prompt 0's G rollouts first)."""

    trajectories: list[Trajectory]
    completions: list[str]
    rewards: list[float]
    items: list[TrainItem]
    metrics: dict[str, float]
    policy_version: int
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int:
        return sum(t.num_sampled_tokens for t in self.trajectories)


class SingleTurnLoop:
    """Drives single-turn GSPO steps through a running :class:`ProxyServer` (see the module docstring).

    Args:
        trainer: the policy being trained.
        engine: the engine behind ``server`` (receives the new weights after each update).
        server: a started proxy in front of ``engine``, reachable over TCP.
        reward_fn: reward of a completion's text.
        group_size: G, completions per prompt.
        max_tokens: the completion budget of each request.
        temperature: sampling temperature (default: the trainer's ``algorithm.temperature``, so the
            recompute and the engine agree).
        timeout_s: HTTP timeout of one completion.
    """

    def __init__(
        self,
        trainer: Trainer,
        engine: Engine,
        server: ProxyServer,
        reward_fn: RewardFn,
        *,
        group_size: int,
        max_tokens: int,
        temperature: float | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.trainer = trainer
        self.engine = engine
        self.server = server
        self.reward_fn = reward_fn
        self.group_size = group_size
        self.max_tokens = max_tokens
        self.temperature = trainer.algo.temperature if temperature is None else temperature
        self.timeout_s = timeout_s
        self.steps_done = 0
        self._runner = asyncio.Runner()
        self._client: httpx.AsyncClient | None = None

    def close(self) -> None:
        """Close the HTTP client and its event loop (the proxy, engine and trainer stay up)."""
        if self._client is not None:
            self._runner.run(self._client.aclose())
            self._client = None
        self._runner.close()

    def __enter__(self) -> SingleTurnLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _complete(self, client: httpx.AsyncClient, session_id: str, messages: Messages, seed: int) -> str:
        url = self.server.session_base_url(session_id) + "/chat/completions"
        body = {"model": "policy", "messages": messages, "max_tokens": self.max_tokens, "seed": seed}
        resp = await client.post(url, json=body)
        if resp.status_code != 200:
            raise EngineError(
                f"the proxy answered HTTP {resp.status_code} for session {session_id}: {resp.text[:300]}; "
                "check the prompt fits the engine's context window"
            )
        content = resp.json()["choices"][0]["message"].get("content")
        return content if isinstance(content, str) else ""

    async def _rollouts(self, sessions: list[tuple[str, Messages, int]]) -> list[str]:
        if self._client is None:  # built on the runner's loop, reused by every step
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            self._client = httpx.AsyncClient(timeout=self.timeout_s, limits=limits)
        client = self._client
        return list(await asyncio.gather(*[self._complete(client, sid, m, seed) for sid, m, seed in sessions]))

    def rollouts(self, prompts: Sequence[Messages]) -> tuple[list[Trajectory], list[str]]:
        """G completions of every prompt through the proxy; the recorded trajectories (rewarded)
        and the completion texts, prompt-major."""
        step = self.steps_done
        sessions: list[tuple[str, Messages, int]] = []
        for p, messages in enumerate(prompts):
            for g in range(self.group_size):
                sid = f"single-turn-{step}-{p}-{g}"
                spec = SessionSpec(
                    sampling_override=SamplingOverride(temperature=self.temperature),
                    metadata={"task_id": f"prompt-{p}"},
                )
                self.server.open_session(sid, spec)
                sessions.append((sid, list(messages), (step * len(prompts) + p) * self.group_size + g))
        try:
            texts = self._runner.run(self._rollouts(sessions))
            trajectories = []
            for (sid, _, _), text in zip(sessions, texts, strict=True):
                traj = self.server.trajectory(sid)
                trajectories.append(traj.model_copy(update={"reward": float(self.reward_fn(text))}))
        finally:
            for sid, _, _ in sessions:
                self.server.close_session(sid)
        return trajectories, texts

    def step(self, prompts: Sequence[Messages]) -> SingleTurnStep:
        """Rollouts → rewards → advantages → one update → weight sync (see the module docstring)."""
        if not prompts:
            raise ValueError("SingleTurnLoop.step needs at least one prompt")
        t0 = time.perf_counter()
        trajectories, texts = self.rollouts(prompts)
        t1 = time.perf_counter()
        items = items_from_trajectories(trajectories, adv_eps=self.trainer.algo.adv_eps)
        metrics = self.trainer.train_step(items)
        t2 = time.perf_counter()
        weights = self.engine.capabilities.in_process_weights
        if weights is None:
            raise EngineError(
                f"SingleTurnLoop copies the trainer's weights into the engine, and the {type(self.engine).__name__} "
                "engine takes no in-process weights; serve the policy with an in-process engine (transformers)"
            )
        version = InProcessCopy(weights).push(self.trainer)
        t3 = time.perf_counter()
        self.steps_done += 1
        return SingleTurnStep(
            trajectories=trajectories,
            completions=texts,
            rewards=[float(t.reward or 0.0) for t in trajectories],
            items=items,
            metrics=metrics,
            policy_version=version,
            timings={
                "rollout_s": t1 - t0,
                # the longest engine wait of any request (they run concurrently); the rest of
                # rollout_s is HTTP, the proxy (template, recorder) and session bookkeeping
                "rollout_engine_s": max(t.counters.get("engine_time_s", 0.0) for t in trajectories),
                "train_s": t2 - t1,
                "sync_s": t3 - t2,
                "step_s": t3 - t0,
            },
        )
