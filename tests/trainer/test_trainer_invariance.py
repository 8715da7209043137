"""Invariance on the real (tiny) model: settings that must give the same gradient do."""

import pytest
import torch

from lego.algos import token_weights
from lego.training.trainer import Trainer, TrainItem
from lego.types import Segment


def _grads(trainer):
    return {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def _close(a, b, rtol=1e-5, atol=1e-7):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=rtol, atol=atol), (k, (a[k] - b[k]).abs().max())


def test_accumulation_1x8_equals_8x1(model_dir, items, make_config):
    one = Trainer(model_dir, make_config(micro_batch_size=8))
    m1 = one.compute_gradients(items)
    eight = Trainer(model_dir, make_config(micro_batch_size=1))
    m8 = eight.compute_gradients(items)
    _close(_grads(one), _grads(eight))
    assert abs(m1["actor/pg_loss"] - m8["actor/pg_loss"]) < 1e-6
    assert m1["actor/tokens"] == m8["actor/tokens"]


def test_a_token_budget_splits_micro_batches_without_changing_the_gradient(model_dir, items, make_config):
    from lego.training.items import micro_batch_indices

    lengths = [len(it.segment.prompt_ids) + len(it.segment.response_ids) for it in items]
    budget = 2 * max(lengths)  # at most two rows of the longest: some micro-batches must split
    free = Trainer(model_dir, make_config(micro_batch_size=8, micro_batch_tokens=None))
    capped = Trainer(model_dir, make_config(micro_batch_size=8, micro_batch_tokens=budget))
    chunks = micro_batch_indices(lengths, 8, budget)
    assert len(chunks) > 1 and [i for c in chunks for i in c] == list(range(len(items)))
    assert all(len(c) * max(lengths[i] for i in c) <= budget for c in chunks)
    m_free, m_capped = free.compute_gradients(items), capped.compute_gradients(items)
    _close(_grads(free), _grads(capped))
    assert abs(m_free["actor/pg_loss"] - m_capped["actor/pg_loss"]) < 1e-6


def test_micro_batches_keep_order_and_put_an_over_budget_item_alone():
    from lego.training.items import micro_batch_indices

    assert micro_batch_indices([5, 5, 5, 5, 5], 2) == [[0, 1], [2, 3], [4]]
    assert micro_batch_indices([10, 10, 40, 10, 10, 10], 4, 30) == [[0, 1], [2], [3, 4, 5]]
    assert micro_batch_indices([100], 4, 30) == [[0]]
    assert micro_batch_indices([], 4, 30) == []


def test_first_update_is_the_plain_policy_gradient(model_dir, items, make_config):
    for ratio in ("sequence", "token"):
        cfg = make_config(micro_batch_size=3)
        if ratio == "token":
            cfg.algorithm.ratio_level, cfg.algorithm.clip_low, cfg.algorithm.clip_high = "token", 0.2, 0.28
        trainer = Trainer(model_dir, cfg)
        m = trainer.compute_gradients(items)
        assert m["actor/ratio_min"] == 1.0 and m["actor/ratio_max"] == 1.0
        got = _grads(trainer)
        trainer.optimizer.zero_grad()
        # −A·∇log π, aggregated the same way (seq-mean-token-mean over episodes), one batch
        from lego.training.items import PaddedBatch as _MicroBatch

        mb = _MicroBatch(items, trainer.device)
        logp, _ = trainer.token_logp(mb)
        w = token_weights(mb.mask, cfg.algorithm.aggregation)
        adv = torch.tensor([it.advantage for it in items])
        (-(adv[:, None] * logp * w).sum()).backward()
        _close(got, _grads(trainer))


def test_two_segment_episode_equals_one_segment_with_the_same_tokens(model_dir, items, make_config):
    """Segment 2 continues segment 1's context after a tool observation; as one segment the same
    tokens carry the observation with mask 0. Same loss, same gradient."""
    s = items[3].segment  # sampled, 3 tool tokens, sampled
    n = (len(s.response_ids) - 3) // 2
    first = Segment(
        prompt_ids=s.prompt_ids,
        response_ids=s.response_ids[:n],
        response_mask=[1] * n,
        response_logprobs=s.response_logprobs[:n],
        response_versions=[0] * n,
    )
    second = Segment(
        prompt_ids=s.prompt_ids + s.response_ids[: n + 3],
        response_ids=s.response_ids[n + 3 :],
        response_mask=[1] * n,
        response_logprobs=s.response_logprobs[n + 3 :],
        response_versions=[0] * n,
    )
    others = [items[0], items[1]]
    split = [
        *others,
        TrainItem(segment=first, advantage=1.3, episode_id="e"),
        TrainItem(segment=second, advantage=1.3, episode_id="e"),
    ]
    whole = [*others, TrainItem(segment=s, advantage=1.3, episode_id="e")]
    # Off-policy too (a further update against an older π_old): GSPO's Δ pools the episode's two
    # segments even when they land in different micro-batches.
    shift = [0.0001 * ((-1) ** j) * (j + 1) for j in range(len(s.response_ids))]
    for off_policy in (False, True):
        for mbs in (1, 4):
            a = Trainer(model_dir, make_config(micro_batch_size=mbs))
            b = Trainer(model_dir, make_config(micro_batch_size=mbs))
            old_a = old_b = None
            if off_policy:
                rec = b.recompute(whole)
                old_b = [*rec[:2], [x + d for x, d in zip(rec[2], shift, strict=True)]]
                old_a = [*rec[:2], old_b[2][:n], old_b[2][n + 3 :]]
            ma = a.compute_gradients(split, old_logprobs=old_a)
            mb = b.compute_gradients(whole, old_logprobs=old_b)
            assert abs(ma["actor/pg_loss"] - mb["actor/pg_loss"]) < 1e-6
            assert ma["actor/episodes"] == mb["actor/episodes"] == 3
            assert ma["actor/ratio_max"] == pytest.approx(mb["actor/ratio_max"], abs=1e-7)
            _close(_grads(a), _grads(b))


def test_zero_advantage_batch_gives_zero_gradient(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config())
    zero = [it.model_copy(update={"advantage": 0.0}) for it in items]
    trainer.compute_gradients(zero)
    assert all(torch.count_nonzero(g) == 0 for g in _grads(trainer).values())


def test_sequence_and_token_level_agree_on_length_one_sequences(model_dir, items, make_config):
    """One sampled token per segment, a further update against a slightly older π_old: the
    sequence ratio is the token ratio, so with the same clip range the gradients agree."""
    ones = []
    for it in items:
        s = it.segment
        ones.append(
            it.model_copy(
                update={
                    "segment": s.model_copy(
                        update={
                            "response_ids": s.response_ids[:1],
                            "response_mask": [1],
                            "response_logprobs": s.response_logprobs[:1],
                            "response_versions": [0],
                        }
                    )
                }
            )
        )
    grads = []
    for level in ("sequence", "token"):
        cfg = make_config(micro_batch_size=3)
        cfg.algorithm.ratio_level = level  # same (GSPO) clip range for both: only the ratio differs
        trainer = Trainer(model_dir, cfg)
        old = [[lp + (0.0002 if i % 2 else -0.0006)] for i, (lp,) in enumerate(trainer.recompute(ones))]
        m = trainer.compute_gradients(ones, old_logprobs=old)
        assert 0 < m["actor/pg_clipfrac"] < 1
        grads.append((_grads(trainer), m))
    _close(grads[0][0], grads[1][0])
    assert grads[0][1]["actor/pg_clipfrac"] == grads[1][1]["actor/pg_clipfrac"]
