"""The in-process engine against a teacher-forced forward pass of the same model (fp32, CPU)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from lego.config import EngineConfig
from lego.engines import build_engine
from lego.engines.transformers_engine import TransformersEngine
from lego.errors import ContextOverflowError, EngineError
from lego.seams import Engine
from lego.types import SamplingParams


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> TransformersEngine:
    return TransformersEngine(tiny_model_dir, max_batch_size=16, max_model_len=256)


def teacher_forced(
    model: torch.nn.Module, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> list[float]:
    """Logprob of each completion token from one unpadded forward pass over prompt + completion."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return [logp[len(prompt) - 1 + i, tok].item() for i, tok in enumerate(completion)]


def assert_matches(engine_lps: list[float], ref_lps: list[float]) -> None:
    a, b = np.array(engine_lps), np.array(ref_lps)
    assert np.max(np.abs(a - b)) <= 1e-4
    if len(a) > 1 and np.std(np.exp(b)) > 0:
        assert np.corrcoef(np.exp(a), np.exp(b))[0, 1] >= 0.9999


def assert_finished_properly(engine: TransformersEngine, gen, max_tokens: int) -> None:
    """Either the token budget ran out, or the last token is an eos id (the random model may say it)."""
    if gen.finish_reason == "length":
        assert len(gen.token_ids) == max_tokens
    else:
        assert gen.finish_reason == "stop" and gen.token_ids[-1] in engine.eos_token_ids
        assert not set(gen.token_ids[:-1]) & set(engine.eos_token_ids)


def prompts_of_different_lengths(chat_format, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": "Fix the failing test in textkit. " * (i % 5) + f"Request {i}: " + "x" * i}]
        out.append(chat_format.render(msgs, add_generation_prompt=True))
    return out


def test_is_an_engine(engine: TransformersEngine) -> None:
    seam: Engine = engine  # the seam is a static Protocol: mypy checks the class against it
    caps = seam.capabilities
    assert caps.in_process_weights is engine and caps.served_weights is None and caps.answer_taker is None
    assert engine.model.dtype == torch.float32
    assert engine.eos_token_ids[:1] == [engine.model.config.eos_token_id]


def test_single_request_logprobs_match_teacher_forcing(engine, chat_format) -> None:
    prompt = chat_format.render([{"role": "user", "content": "hello"}], add_generation_prompt=True)
    for temperature in (1.0, 0.7):
        gen = asyncio.run(engine.generate(prompt, SamplingParams(temperature=temperature, max_tokens=24, seed=3)))
        assert_finished_properly(engine, gen, 24)
        assert gen.prompt_tokens == len(prompt)
        assert_matches(gen.logprobs, teacher_forced(engine.model, prompt, gen.token_ids, temperature))


def test_sixteen_concurrent_requests_are_batched_without_padding_leaks(engine, chat_format) -> None:
    prompts = prompts_of_different_lengths(chat_format, 16)
    assert len({len(p) for p in prompts}) > 8

    async def run() -> list:
        # Hold the worker so all 16 requests queue up and run as one batch.
        with engine.paused():
            tasks = [
                asyncio.create_task(engine.generate(p, SamplingParams(max_tokens=8 + 2 * i, seed=i, top_k=0)))
                for i, p in enumerate(prompts)
            ]
            await asyncio.sleep(0.05)
        return await asyncio.gather(*tasks)

    before = engine.stats["batches"]
    gens = asyncio.run(run())
    assert engine.stats["batches"] == before + 1 and engine.stats["max_batch_size_seen"] == 16
    for i, (prompt, gen) in enumerate(zip(prompts, gens, strict=True)):
        assert_finished_properly(engine, gen, 8 + 2 * i)
        assert_matches(gen.logprobs, teacher_forced(engine.model, prompt, gen.token_ids))
    # A seeded request draws the same tokens alone as inside the batch.
    alone = asyncio.run(engine.generate(prompts[5], SamplingParams(max_tokens=18, seed=5)))
    assert alone.token_ids == gens[5].token_ids


def test_requests_join_a_running_batch_without_padding_leaks(tiny_model_dir, chat_format) -> None:
    engine = TransformersEngine(tiny_model_dir, max_batch_size=8)
    engine.eos_token_ids = []  # fixed-length generations, so the first request is surely still running
    prompts = prompts_of_different_lengths(chat_format, 4)

    async def run() -> list:
        long = asyncio.create_task(engine.generate(prompts[0], SamplingParams(max_tokens=400, seed=0)))
        while engine.stats["generated_tokens"] < 3:
            await asyncio.sleep(0.005)
        late = [engine.generate(p, SamplingParams(max_tokens=10 + i, seed=i)) for i, p in enumerate(prompts[1:], 1)]
        return await asyncio.gather(long, *late)

    gens = asyncio.run(run())
    assert engine.stats["batches"] == 1 and engine.stats["joined_mid_batch"] == 3
    for i, (prompt, gen) in enumerate(zip(prompts, gens, strict=True)):
        assert len(gen.token_ids) == (400 if i == 0 else 10 + i)
        assert_matches(gen.logprobs, teacher_forced(engine.model, prompt, gen.token_ids))
    asyncio.run(engine.close())


def test_greedy_uses_argmax_and_reports_temperature_one_logprobs(engine, chat_format) -> None:
    prompt = chat_format.render([{"role": "user", "content": "greedy"}], add_generation_prompt=True)
    gen = asyncio.run(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=6)))
    ids = list(prompt)
    for tok in gen.token_ids:
        with torch.no_grad():
            assert tok == int(engine.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        ids.append(tok)
    assert_matches(gen.logprobs, teacher_forced(engine.model, prompt, gen.token_ids, 1.0))


def test_stop_token_is_included_and_finish_reason_stop(engine, chat_format) -> None:
    prompt = chat_format.render([{"role": "user", "content": "stop"}], add_generation_prompt=True)
    greedy = asyncio.run(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=5)))
    stop_at = greedy.token_ids[2]
    gen = asyncio.run(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=5, stop_token_ids=[stop_at])))
    first = greedy.token_ids.index(stop_at)
    assert gen.token_ids == greedy.token_ids[: first + 1]
    assert gen.finish_reason == "stop"


def test_top_k_one_is_greedy_but_logprobs_stay_untruncated(engine, chat_format) -> None:
    prompt = chat_format.render([{"role": "user", "content": "topk"}], add_generation_prompt=True)
    greedy = asyncio.run(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=6)))
    topk = asyncio.run(engine.generate(prompt, SamplingParams(temperature=1.0, top_k=1, max_tokens=6, seed=9)))
    top_p = asyncio.run(engine.generate(prompt, SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=6, seed=9)))
    assert topk.token_ids == greedy.token_ids == top_p.token_ids
    assert all(lp < 0 for lp in topk.logprobs)  # log p under the full distribution, not log 1
    assert_matches(topk.logprobs, greedy.logprobs)


def test_context_overflow_and_clamping(engine) -> None:
    with pytest.raises(ContextOverflowError, match="context window of 256"):
        asyncio.run(engine.generate(list(range(3, 259)), SamplingParams(max_tokens=4)))
    gen = asyncio.run(engine.generate(list(range(3, 253)), SamplingParams(max_tokens=100, seed=0)))
    assert_finished_properly(engine, gen, 6)  # max_tokens=100 clamped to the 6 positions left
    with pytest.raises(ContextOverflowError):
        asyncio.run(engine.score([list(range(3, 300))], [10], 1.0))
    with pytest.raises(EngineError, match="empty prompt"):
        asyncio.run(engine.generate([], SamplingParams()))


def test_score_matches_teacher_forcing(engine, chat_format) -> None:
    prompts = prompts_of_different_lengths(chat_format, 5)
    completions = [[10 + i, 20, 30 + i, 40][: i + 1] for i in range(5)]
    scores = asyncio.run(
        engine.score([p + c for p, c in zip(prompts, completions, strict=True)], [len(p) for p in prompts], 0.8)
    )
    for p, c, s in zip(prompts, completions, scores, strict=True):
        assert_matches(s, teacher_forced(engine.model, p, c, 0.8))


def test_load_weights_bumps_version_and_changes_outputs(tiny_model_dir, chat_format) -> None:
    engine = TransformersEngine(tiny_model_dir)
    prompt = chat_format.render([{"role": "user", "content": "weights"}], add_generation_prompt=True)
    before = asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=4, seed=1)))
    assert before.policy_version == 0
    state = {k: v * 0.5 for k, v in engine.model.state_dict().items() if k.endswith("mlp.down_proj.weight")}
    assert engine.load_weights(state) == 1
    after = asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=4, seed=1)))
    assert after.policy_version == 1 and after.logprobs != before.logprobs
    assert engine.load_weights({}) == 2
    with pytest.raises(EngineError, match="not in the model"):
        engine.load_weights({"no.such.weight": torch.zeros(1)})
    asyncio.run(engine.close())


def test_cancelled_request_leaves_the_batch_and_others_finish(engine, chat_format) -> None:
    prompts = prompts_of_different_lengths(chat_format, 3)

    async def run() -> list:
        with engine.paused():
            tasks = [
                asyncio.create_task(engine.generate(p, SamplingParams(max_tokens=12, seed=i)))
                for i, p in enumerate(prompts)
            ]
            await asyncio.sleep(0.05)
            tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, cancelled, last = asyncio.run(run())
    assert isinstance(cancelled, asyncio.CancelledError)
    for prompt, gen in ((prompts[0], first), (prompts[2], last)):
        assert_finished_properly(engine, gen, 12)
        assert_matches(gen.logprobs, teacher_forced(engine.model, prompt, gen.token_ids))


def test_weight_swap_lands_between_decode_steps_and_applies_to_later_requests(tiny_model_dir, chat_format) -> None:
    engine = TransformersEngine(tiny_model_dir)
    engine.eos_token_ids = []
    prompts = prompts_of_different_lengths(chat_format, 2)

    async def run() -> tuple:
        long = asyncio.create_task(engine.generate(prompts[0], SamplingParams(max_tokens=200, seed=0)))
        while engine.stats["generated_tokens"] < 3:
            await asyncio.sleep(0.005)
        swap = asyncio.create_task(asyncio.to_thread(engine.load_weights, {}))
        # The swap may be asked for and done between two polls (on a busy box it once was, and this
        # loop then waited for a pause that had passed until the test timed out): either will do.
        while not engine.scheduler.pausing and not swap.done():
            await asyncio.sleep(0.001)
        late = asyncio.create_task(engine.generate(prompts[1], SamplingParams(max_tokens=5, seed=1)))
        return await asyncio.gather(long, swap, late)

    long, version, late = asyncio.run(run())
    assert len(long.token_ids) == 200 and long.policy_version == 0  # the swap did not cut it short
    swap_at = long.versions.index(1)  # it did not wait for the 200 tokens either: it landed mid-generation
    assert 3 <= swap_at < 200 and long.versions == [0] * swap_at + [1] * (200 - swap_at)
    assert version == 1 and late.policy_version == 1 and set(late.versions) == {1}
    assert engine.stats["swaps_mid_batch"] == 1 and engine.stats["joined_mid_batch"] == 1  # late joined after it
    asyncio.run(engine.close())


def test_build_engine_from_config(tiny_model_dir) -> None:
    engine = build_engine(EngineConfig(kind="transformers", model=str(tiny_model_dir), device="cpu", max_model_len=64))
    assert isinstance(engine, TransformersEngine) and engine.max_model_len == 64


@pytest.mark.gpu
def test_cuda_bf16_batched_logprobs_track_teacher_forcing(tiny_model_dir, chat_format) -> None:
    """On CUDA the default dtype is bf16, so agreement is looser than the fp32 CPU bound."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    engine = TransformersEngine(tiny_model_dir, device="cuda")
    assert engine.model.dtype == torch.bfloat16
    prompts = prompts_of_different_lengths(chat_format, 8)

    async def run() -> list:
        return await asyncio.gather(
            *[engine.generate(p, SamplingParams(max_tokens=16, seed=i)) for i, p in enumerate(prompts)]
        )

    gens = asyncio.run(run())
    ref = asyncio.run(
        engine.score([p + g.token_ids for p, g in zip(prompts, gens, strict=True)], [len(p) for p in prompts], 1.0)
    )
    a = np.exp(np.concatenate([g.logprobs for g in gens]))
    b = np.exp(np.concatenate(ref))
    assert np.corrcoef(a, b)[0, 1] >= 0.99
    asyncio.run(engine.close())


def _agent_prompts(chat_format, n: int) -> list[list[int]]:
    """Prompts that share a long system prompt (like an agent's), then differ."""
    system = "You are a careful engineer. Use the tools; call exactly one per reply. " * 6
    return [
        chat_format.render(
            [{"role": "system", "content": system}, {"role": "user", "content": f"task {i}: " + "y" * (3 * i)}],
            add_generation_prompt=True,
        )
        for i in range(n)
    ]


def test_shared_prefix_cache_is_exact_and_hits(tiny_model_dir, chat_format) -> None:
    """Prompts extending a common prefix prefill only their suffix; logprobs and tokens are unchanged."""
    cached = TransformersEngine(tiny_model_dir, max_batch_size=8)
    plain = TransformersEngine(tiny_model_dir, max_batch_size=8, prefix_cache=False)
    prompts = _agent_prompts(chat_format, 6)

    async def run(engine: TransformersEngine) -> list:
        return await asyncio.gather(
            *[engine.generate(p, SamplingParams(max_tokens=12, seed=i)) for i, p in enumerate(prompts)]
        )

    first, second, reference = asyncio.run(run(cached)), asyncio.run(run(cached)), asyncio.run(run(plain))
    assert cached.stats["prefix_builds"] == 1 and cached.stats["prefix_hits"] >= 6
    assert cached.stats["prefix_tokens_saved"] >= 6 * 64 and plain.stats["prefix_hits"] == 0
    for prompt, a, b, ref in zip(prompts, first, second, reference, strict=True):
        assert a.token_ids == b.token_ids == ref.token_ids
        assert_matches(b.logprobs, teacher_forced(cached.model, prompt, b.token_ids))
        assert_matches(b.logprobs, ref.logprobs)
    asyncio.run(cached.close())
    asyncio.run(plain.close())


def test_prefix_cache_is_rebuilt_after_a_weight_update(tiny_model_dir, chat_format) -> None:
    engine = TransformersEngine(tiny_model_dir, max_batch_size=8)
    prompts = _agent_prompts(chat_format, 3)

    async def run() -> list:
        return await asyncio.gather(
            *[engine.generate(p, SamplingParams(max_tokens=6, seed=i)) for i, p in enumerate(prompts)]
        )

    asyncio.run(run())
    state = {k: v * 0.5 for k, v in engine.model.state_dict().items() if k.endswith("mlp.down_proj.weight")}
    engine.load_weights(state)
    gens = asyncio.run(run())
    assert engine.stats["prefix_builds"] == 2
    for prompt, gen in zip(prompts, gens, strict=True):
        assert gen.policy_version == 1
        assert_matches(gen.logprobs, teacher_forced(engine.model, prompt, gen.token_ids))
    asyncio.run(engine.close())


def _long_prompts(chat_format, n: int) -> list[list[int]]:
    """Agent-like prompts of ~600-700 tokens: a shared system prompt, then a long task of its own."""
    system = "You are a careful engineer. Use the tools; call exactly one per reply. " * 6
    return [
        chat_format.render(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": " ".join(f"step{j} of task {i}" for j in range(60 + 4 * i))},
            ],
            add_generation_prompt=True,
        )
        for i in range(n)
    ]


def test_admission_control_queues_long_prompts_within_the_token_budget(tiny_model_dir, chat_format) -> None:
    """Five concurrent long prompts under a budget that fits two: they queue instead of padding into one
    batch, the batch never holds more KV slots than the budget, and every result equals the request
    run alone on an engine without a budget and without chunked prefill."""
    prompts = _long_prompts(chat_format, 5)
    budget = 2 * (max(len(p) for p in prompts) + 16)
    assert 3 * (min(len(p) for p in prompts) + 16) > budget  # three never fit: the budget must bite
    limited = TransformersEngine(tiny_model_dir, max_batch_size=8, max_batch_tokens=budget, prefill_chunk_tokens=64)
    plain = TransformersEngine(tiny_model_dir, max_batch_size=8, max_batch_tokens=None, prefill_chunk_tokens=None)

    def params(i: int) -> SamplingParams:
        return SamplingParams(temperature=0.0 if i == 0 else 1.0, max_tokens=16, seed=i)

    async def concurrent() -> list:
        with limited.paused():  # all five queue before the first batch forms
            tasks = [asyncio.create_task(limited.generate(p, params(i))) for i, p in enumerate(prompts[:4])]
            await asyncio.sleep(0.05)
        while limited.stats["generated_tokens"] < 3:
            await asyncio.sleep(0.005)
        tasks.append(asyncio.create_task(limited.generate(prompts[4], params(4))))  # arrives mid-batch
        return await asyncio.gather(*tasks)

    gens = asyncio.run(concurrent())
    alone = [asyncio.run(plain.generate(p, params(i))) for i, p in enumerate(prompts)]
    stats = limited.stats
    assert 0 < stats["peak_batch_tokens"] <= budget, (stats, budget)
    assert stats["admission_waits"] >= 1 and stats["max_batch_size_seen"] == 2
    for prompt, gen, ref in zip(prompts, gens, alone, strict=True):
        assert gen.token_ids == ref.token_ids and gen.finish_reason == ref.finish_reason
        assert_matches(gen.logprobs, ref.logprobs)
        assert_matches(gen.logprobs, teacher_forced(limited.model, prompt, gen.token_ids))
    asyncio.run(limited.close())
    asyncio.run(plain.close())


def test_a_request_over_the_budget_runs_alone_and_chunked_prefill_is_exact(tiny_model_dir, chat_format) -> None:
    prompts = _long_prompts(chat_format, 3)
    tight = TransformersEngine(tiny_model_dir, max_batch_tokens=64, prefill_chunk_tokens=37, prefix_cache=False)

    async def run() -> list:
        return await asyncio.gather(
            *[tight.generate(p, SamplingParams(max_tokens=6, seed=i)) for i, p in enumerate(prompts)]
        )

    gens = asyncio.run(run())
    assert tight.stats["max_batch_size_seen"] == 1 and tight.stats["batches"] == 3
    for prompt, gen in zip(prompts, gens, strict=True):
        assert_finished_properly(tight, gen, 6)
        assert_matches(gen.logprobs, teacher_forced(tight.model, prompt, gen.token_ids))
    asyncio.run(tight.close())


def test_a_sessions_next_turn_reuses_its_previous_turn_and_stays_exact(tiny_model_dir, chat_format) -> None:
    """Turn 2 extends turn 1's prompt and completion (plus a tool result): it prefills only what was
    appended, from the KV turn 1 left, and its tokens and logprobs are those of a cold engine. A turn
    whose prompt diverges inside the earlier completion reuses the common part only; a weight update
    drops every kept sequence."""
    warm = TransformersEngine(tiny_model_dir, max_batch_size=8)
    cold = TransformersEngine(tiny_model_dir, max_batch_size=8, session_cache_mb=0)
    firsts = _agent_prompts(chat_format, 4)
    tool = chat_format.encode(
        "<|im_end|>\n<|im_start|>user\nexit code 0\n./pkg/mod.py<|im_end|>\n<|im_start|>assistant\n"
    )

    async def turn(engine: TransformersEngine, prompts: list[list[int]], seed: int) -> list:
        return await asyncio.gather(
            *[engine.generate(p, SamplingParams(max_tokens=16, seed=seed + i)) for i, p in enumerate(prompts)]
        )

    one = asyncio.run(turn(warm, firsts, 0))
    assert warm.stats["sessions_kept"] == 4 and cold.stats["sessions_kept"] == 0
    seconds = [p + g.token_ids + tool for p, g in zip(firsts, one, strict=True)]
    saved = warm.stats["prefix_tokens_saved"]
    two, reference = asyncio.run(turn(warm, seconds, 10)), asyncio.run(turn(cold, seconds, 10))
    assert warm.stats["session_hits"] == 4
    # each row started after its whole previous turn (all but its last sampled token, never run)
    expected = sum(len(p) + len(g.token_ids) - 1 for p, g in zip(firsts, one, strict=True))
    assert warm.stats["prefix_tokens_saved"] - saved == expected
    for prompt, got, ref in zip(seconds, two, reference, strict=True):
        assert got.token_ids == ref.token_ids
        assert_matches(got.logprobs, ref.logprobs)
        assert_matches(got.logprobs, teacher_forced(warm.model, prompt, got.token_ids))

    diverged = seconds[0][: len(firsts[0]) + 2] + chat_format.encode("something else entirely") + tool
    hits = warm.stats["session_hits"]
    [got] = asyncio.run(turn(warm, [diverged], 20))
    assert warm.stats["session_hits"] == hits + 1
    assert_matches(got.logprobs, teacher_forced(warm.model, diverged, got.token_ids))

    # a later turn batched with a new session: rows are no wider than plain left padding
    unrelated = chat_format.render([{"role": "user", "content": "z " * 300}], add_generation_prompt=True)
    mixed = [seconds[2] + two[2].token_ids + tool, unrelated]
    warm.stats["peak_batch_tokens"] = 0
    got = asyncio.run(turn(warm, mixed, 40))
    assert warm.stats["peak_batch_tokens"] <= 2 * (max(len(p) for p in mixed) + 16)
    for prompt, gen in zip(mixed, got, strict=True):
        assert_matches(gen.logprobs, teacher_forced(warm.model, prompt, gen.token_ids))

    state = {k: v * 0.5 for k, v in warm.model.state_dict().items() if k.endswith("mlp.down_proj.weight")}
    warm.load_weights(state)
    hits = warm.stats["session_hits"]
    [got] = asyncio.run(turn(warm, [seconds[1]], 30))
    assert warm.stats["session_hits"] == hits  # the kept KV was computed with the old weights
    assert_matches(got.logprobs, teacher_forced(warm.model, seconds[1], got.token_ids))
    asyncio.run(warm.close())
    asyncio.run(cold.close())
