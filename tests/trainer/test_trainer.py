import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from lego.algos import PEARSON
from lego.errors import FidelityError
from lego.training.items import PaddedBatch
from lego.training.trainer import Trainer, TrainItem, items_from_trajectories
from lego.types import Trajectory


def _forward_logprobs(model_dir, items, temperature=1.0):
    """An independent forward pass per segment (no batching, no padding)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for it in items:
            s = it.segment
            logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float() / temperature
            logp = torch.log_softmax(logits, -1)
            p = len(s.prompt_ids)
            out.append([float(logp[p - 1 + j, t]) for j, t in enumerate(s.response_ids)])
    return out


def test_recompute_matches_an_independent_forward_pass(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config(micro_batch_size=3))
    got = trainer.recompute(items)
    want = _forward_logprobs(model_dir, items)
    assert [len(g) for g in got] == [len(it.segment.response_ids) for it in items]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-5)
    # and the engine-recorded logprobs (sampled at the same temperature) agree on every sampled token
    for g, it in zip(got, items, strict=True):
        for lp, m, r in zip(g, it.segment.response_mask, it.segment.response_logprobs, strict=True):
            if m:
                assert lp == pytest.approx(r, abs=1e-5)


def test_recompute_at_run_temperature(model_dir, items, make_config):
    cfg = make_config()
    cfg.algorithm.temperature = 0.7
    got = Trainer(model_dir, cfg).recompute(items[:2])
    want = _forward_logprobs(model_dir, items[:2], temperature=0.7)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-5)


def test_step_reports_metrics_and_changes_weights(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config(micro_batch_size=4))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    m = trainer.step(items)
    assert m[PEARSON] > 0.9999
    assert m[PEARSON + "/ha"] > 0.9999 and m[PEARSON + "/hb"] > 0.9999
    assert m["actor/ratio_max"] == 1.0 and m["actor/ratio_min"] == 1.0  # one update per batch: on-policy
    assert m["actor/pg_clipfrac"] == 0.0
    assert m["actor/tokens"] == sum(it.segment.num_sampled for it in items)
    assert m["actor/entropy"] > 0 and m["actor/grad_norm"] > 0
    for key in (
        "rollout_corr/kl",
        "rollout_corr/k3_kl",
        "rollout_corr/chi2_token",
        "rollout_corr/ess_frac",
        "training/rollout_probs_diff_max",
        "perf/tokens_per_s",
        "actor/segments",
        "actor/episodes",
    ):
        assert key in m
    assert trainer.step_count == 1
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # the next recompute sees the new policy: ratios vs the rollout are no longer 1
    m2 = trainer.step(items)
    assert m2["rollout_corr/kl"] != 0.0


def test_a_step_without_any_advantage_leaves_the_weights_and_the_optimizer_as_they_were(model_dir, items, make_config):
    """Every group's rewards agreed: the gradient is exactly zero, and AdamW would still move the weights
    (weight decay now, momentum after a step with signal). No step: weights and optimizer state unchanged,
    the metrics and step count as for any step. A KL term is a gradient of its own: that step is taken."""
    flat = [it.model_copy(update={"advantage": 0.0}) for it in items]
    trainer = Trainer(model_dir, make_config(micro_batch_size=4, weight_decay=0.1))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    m = trainer.step(flat)
    assert m["actor/grad_norm"] == 0.0 and m[PEARSON] > 0.9999 and trainer.step_count == 1
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert trainer.optimizer.state_dict()["state"] == {}  # AdamW never stepped: no moments, no count

    trainer.step(items)  # a step with signal moves the weights and fills AdamW's moments ...
    moved = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    state = {k: {n: t.clone() for n, t in v.items()} for k, v in trainer.optimizer.state_dict()["state"].items()}
    assert any(not torch.equal(before[k], moved[k]) for k in before)
    trainer.step(flat)  # ... which a flat step after it does not replay
    assert all(torch.equal(moved[k], v) for k, v in trainer.model.state_dict().items())
    after = trainer.optimizer.state_dict()["state"]
    assert all(torch.equal(state[k][n], after[k][n]) for k in state for n in state[k])

    cfg = make_config(micro_batch_size=4)
    cfg.algorithm.kl_coef = 0.1
    with_kl = Trainer(model_dir, cfg)
    with_kl.step(items)
    kl_moved = {k: v.clone() for k, v in with_kl.model.state_dict().items()}
    assert with_kl.step(flat)["actor/grad_norm"] > 0.0  # away from the reference: the KL pulls back
    assert any(not torch.equal(kl_moved[k], v) for k, v in with_kl.model.state_dict().items())


def test_fidelity_gate_stops_a_temperature_mismatch(model_dir, items, make_config):
    cfg = make_config()
    cfg.algorithm.temperature = 0.25  # engine sampled at 1.0
    cfg.training.fidelity.patience = 2
    trainer = Trainer(model_dir, cfg)
    trainer.step(items)
    with pytest.raises(FidelityError, match=r"training/rollout_actor_probs_pearson_corr = 0\.\d+ .*0\.99"):
        trainer.step(items)
    assert trainer.step_count == 1  # the bad update was never applied


def test_rollout_logprobs_override(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config())
    shifted = [[(lp - 0.5) if lp is not None else None for lp in it.segment.response_logprobs] for it in items]
    m = trainer.step(items, rollout_logprobs=shifted)
    assert m["rollout_corr/kl"] == pytest.approx(-0.5, abs=1e-4)


def test_a_missing_logprob_is_refused_at_every_hop_never_read_as_zero(model_dir, items, make_config):
    """ "No logprob" is None on a segment and nowhere a number: an override that leaves a sampled
    token without one, or a π_old row that is short, names the row instead of padding it with 0."""
    trainer = Trainer(model_dir, make_config())
    holes = [list(it.segment.response_logprobs) for it in items]
    sampled = items[1].segment.response_mask.index(1)
    holes[1][sampled] = None
    with pytest.raises(ValueError, match=rf"(?s)rollout_logprobs\[1\] .*response token {sampled} is marked sampled"):
        trainer.step(items, rollout_logprobs=holes)
    short = trainer.recompute(items)
    short[2] = []
    with pytest.raises(ValueError, match=r"old_logprobs\[2\] has 0 values for \d+ response tokens"):
        trainer.step(items, old_logprobs=short)
    assert trainer.step_count == 0


def test_padded_batch_holds_the_recorded_logprob_under_the_mask(items):
    mb = PaddedBatch(items[:3], torch.device("cpu"))
    for row, it in enumerate(items[:3]):
        seg = it.segment
        for j, (m, lp) in enumerate(zip(seg.response_mask, seg.response_logprobs, strict=True)):
            assert mb.mask[row, j] == m
            if m:
                assert mb.rollout_logp[row, j].item() == pytest.approx(lp, abs=1e-6)


def test_tis_and_kl_options_run(model_dir, items, make_config):
    cfg = make_config()
    cfg.algorithm.tis_cap = 2.0
    cfg.algorithm.kl_coef = 0.1
    trainer = Trainer(model_dir, cfg)
    trainer.step(items)
    m = trainer.step(items)
    assert m["actor/tis_weight_mean"] > 0
    assert m["actor/ref_kl"] > 0  # policy has moved away from the frozen reference


def test_items_from_trajectories_drops_infra_failures(items):
    ok = Trajectory(
        trajectory_id="t1", session_id="s", harness="h", reward=1.0, segments=[items[0].segment, items[1].segment]
    )
    bad = Trajectory(
        trajectory_id="t2",
        session_id="s",
        segments=[items[2].segment],
        termination="env_error",
        cause="infrastructure",
        reward=0.0,
    )
    out = items_from_trajectories([ok, bad], [0.5, 1.0])
    assert [(o.episode_id, o.advantage, o.harness) for o in out] == [("t1", 0.5, "h"), ("t1", 0.5, "h")]
    assert isinstance(out[0], TrainItem)
    # default advantages: grouped by task, the infra failure neither counted nor trained on
    group = [
        Trajectory(trajectory_id=f"r{i}", session_id="s", task_id="task", reward=r, segments=[items[i].segment])
        for i, r in enumerate([1.0, 0.0, 0.0])
    ]
    fail = Trajectory(
        trajectory_id="f",
        session_id="s",
        task_id="task",
        reward=0.0,
        termination="env_error",
        cause="infrastructure",
        segments=[items[3].segment],
    )
    flat = Trajectory(trajectory_id="z", session_id="s", task_id="other", reward=1.0, segments=[items[4].segment])
    out = items_from_trajectories([*group, fail, flat])
    adv = {o.episode_id: o.advantage for o in out}
    assert set(adv) == {"r0", "r1", "r2", "z"}
    assert adv["r0"] > 0 > adv["r1"] == adv["r2"] and adv["z"] == 0.0


def test_empty_batch_is_refused(model_dir, make_config):
    with pytest.raises(ValueError, match="at least one TrainItem"):
        Trainer(model_dir, make_config()).step([])


def test_from_config_resolves_a_model_dir(model_dir, make_config):
    cfg = make_config()
    cfg.engine.model = str(model_dir)
    trainer = Trainer.from_config(cfg, device="cpu")
    assert trainer.model_dir == model_dir and trainer.step_count == 0


def test_logits_to_keep_path_equals_full_logits_path(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config(micro_batch_size=3))
    assert trainer._logits_to_keep  # Qwen3 takes per-row positions
    fast = trainer.recompute(items)
    trainer._logits_to_keep = False
    slow = trainer.recompute(items)
    for a, b in zip(fast, slow, strict=True):
        assert a == pytest.approx(b, abs=1e-6)


def test_a_transformers_that_indexes_positions_as_1d_gives_the_same_logprobs(model_dir, items, make_config):
    """transformers 5.17 (the GPU image's) takes ``logits_to_keep`` as 1-D positions: a (B, R) tensor
    indexes every row with every row's positions, (B, B, R, V). Found on the H200: the update raised."""
    trainer = Trainer(model_dir, make_config(micro_batch_size=3))
    expected = trainer.recompute(items)
    real = trainer.model.forward

    def one_d(*args, logits_to_keep=None, **kwargs):  # the old indexing, from the full logits
        out = real(*args, **kwargs)
        out.logits = out.logits[:, logits_to_keep, :]
        return out

    trainer.model.forward = one_d
    got = trainer.recompute(items)
    for a, b in zip(got, expected, strict=True):
        assert a == pytest.approx(b, abs=1e-6)


def test_further_update_against_an_older_policy_clips(model_dir, items, make_config):
    trainer = Trainer(model_dir, make_config())
    old = trainer.recompute(items)
    trainer.step(items)
    consecutive = trainer.gate.consecutive
    m = trainer.step(items, old_logprobs=old)
    assert m["actor/ratio_max"] != 1.0 or m["actor/ratio_min"] != 1.0
    assert m["actor/pg_clipfrac"] > 0  # lr 1e-3 moves the policy far past GSPO's 4e-4 trust region
    assert m[PEARSON] > 0.9999  # fidelity is rollout vs the given π_old
    assert trainer.gate.consecutive == consecutive


def test_warmup_ramps_the_learning_rate_linearly(model_dir, items, make_config):
    cfg = make_config()
    cfg.training.lr, cfg.training.warmup_steps = 1e-3, 4
    trainer = Trainer(model_dir, cfg)
    assert [trainer.lr_at(k) for k in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    seen = [trainer.step(items)["actor/lr"] for _ in range(2)]
    assert seen == pytest.approx([2.5e-4, 5e-4])  # the metric is the lr the update used
    cfg.training.warmup_steps = 0
    assert Trainer(model_dir, cfg).lr_at(0) == 1e-3


def test_no_logprob_is_none_on_a_segment_and_nan_in_the_batch_never_zero(items):
    """One encoding per container: ``None`` in the segment's list, NaN in the padded batch (tool and
    template tokens, padding), the recorded value at sampled and constrained tokens."""
    mb = PaddedBatch(items, torch.device("cpu"))
    for row, it in enumerate(items):
        seg = it.segment
        for j, lp in enumerate(seg.response_logprobs):
            got = mb.rollout_logp[row, j].item()
            assert math.isnan(got) if lp is None else got == pytest.approx(lp, abs=1e-6)
        assert torch.isnan(mb.rollout_logp[row, len(seg.response_ids) :]).all()  # padding
    assert any(lp is None for it in items for lp in it.segment.response_logprobs)  # there are some
