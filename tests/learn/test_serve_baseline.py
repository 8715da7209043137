"""The baseline of `lego serve --learn`'s scalar advantage (lego.learn.baseline): the arithmetic of each
mode, the collapse it exists to prevent, its state, and the config that selects it."""

from __future__ import annotations

import pytest

from lego.config import load_config
from lego.errors import ConfigError
from lego.learn.baseline import Baseline

# The first `lego bench use` measurement, as the learner saw it: two early steps, then steps of failing
# sessions only (the rules judge scores a re-query -0.5).
COLLAPSE = [[0.5, -0.5, 0.5, -0.5], [0.5, 0.5, 0.5, 0.5], *[[-0.5, -0.5, -0.5, -0.5]] * 3, [-0.5, -0.5, -0.5, 0.5]]


def test_batch_centres_each_step_on_its_own_mean() -> None:
    b = Baseline("batch")
    adv, sub = b.advantages([-0.5, -0.5, 0.5])
    assert sub == pytest.approx(-1 / 6)
    assert adv == pytest.approx([-1 / 3, -1 / 3, 2 / 3])
    assert sum(adv) == pytest.approx(0.0, abs=1e-12)
    b.update([-0.5, -0.5, 0.5])  # no state: the next step is centred on its own mean only
    assert b.advantages([1.0, 0.0]) == (pytest.approx([0.5, -0.5]), pytest.approx(0.5))
    assert b.state_dict() == {"mode": "batch", "value": None, "steps": 0}


def test_batch_of_agreeing_scores_trains_nothing_exactly() -> None:
    # 0.1 x 3 does not sum to 0.3 in floating point: the advantages must still be exactly 0, not rounding noise
    for scores in ([-0.5] * 7, [0.1] * 3, [1.0]):
        adv, sub = Baseline("batch").advantages(scores)
        assert adv == [0.0] * len(scores) and sub == pytest.approx(scores[0])


def test_batch_with_std_divides_by_the_sample_spread() -> None:
    b = Baseline("batch", scale_std=True, eps=1e-6)
    adv, sub = b.advantages([-1.0, 0.0, 1.0])  # mean 0, sample std 1
    assert sub == 0.0 and adv == pytest.approx([-1 / (1 + 1e-6), 0.0, 1 / (1 + 1e-6)])
    # why it is off by default: nearly agreeing scores become full-size advantages
    adv, _ = b.advantages([-0.5, -0.5, -0.5, -0.4])
    assert max(abs(a) for a in adv) == pytest.approx(1.5, rel=1e-4)
    assert Baseline("batch", scale_std=True).advantages([0.3]) == ([0.0], pytest.approx(0.3))


def test_running_starts_from_the_first_mean_and_moves_by_its_rate() -> None:
    b = Baseline("running", rate=0.5)
    adv, sub = b.advantages([1.0, 0.5])  # no past: the step's own mean
    assert sub == pytest.approx(0.75) and adv == pytest.approx([0.25, -0.25])
    b.update([1.0, 0.5])
    assert (b.value, b.steps) == (pytest.approx(0.75), 1)
    adv, sub = b.advantages([-0.5, -0.5])  # the past: 0.75 -- it lags a sudden drop
    assert sub == pytest.approx(0.75) and adv == pytest.approx([-1.25, -1.25])
    b.update([-0.5, -0.5])
    assert b.value == pytest.approx(0.75 + 0.5 * (-0.5 - 0.75)) and b.steps == 2
    b.update([0.0])
    assert b.value == pytest.approx(0.125 * 0.5)


def test_none_is_the_score() -> None:
    b = Baseline("none")
    assert b.advantages([-0.5, -0.5]) == ([-0.5, -0.5], 0.0)
    b.update([-0.5])
    assert b.state_dict()["value"] is None


def test_all_negative_scores_no_longer_give_all_negative_advantages() -> None:
    """The measured collapse: without a baseline every late step is all negative; centred, none is."""
    none, batch, running = Baseline("none"), Baseline("batch"), Baseline("running", rate=0.5)
    all_negative = {"none": 0, "batch": 0, "running": 0}
    for scores in COLLAPSE:
        for b in (none, batch, running):
            adv, _ = b.advantages(scores)
            all_negative[b.mode] += all(a < 0 for a in adv)
            b.update(scores)
    assert all_negative["none"] == 3  # the three failing steps push every token down
    assert all_negative["batch"] == 0  # each step sums to zero
    assert all_negative["running"] == 3  # it lags: the drop after a good step is all negative ...
    # ... until it has caught up, when a failing step is what is usual and the odd success stands out
    caught_up = Baseline("running", rate=0.5, value=-0.45, steps=5)
    adv, _ = caught_up.advantages([-0.5, -1.0, -0.5, -0.25])
    assert adv == pytest.approx([-0.05, -0.55, -0.05, 0.2])
    assert Baseline("batch").advantages([-0.5, -1.0, -0.5, -0.25])[0] == pytest.approx(
        [0.0625, -0.4375, 0.0625, 0.3125]
    )


def test_the_running_state_round_trips_and_another_mode_starts_afresh() -> None:
    b = Baseline("running", rate=0.3)
    for scores in COLLAPSE:
        b.update(scores)
    state = b.state_dict()
    again = Baseline("running", rate=0.3)
    again.load_state_dict(state)
    assert (again.value, again.steps) == (b.value, b.steps) and again.steps == len(COLLAPSE)
    assert again.advantages([0.0]) == b.advantages([0.0])
    for other in (None, {}, {"mode": "batch", "value": None, "steps": 0}):
        fresh = Baseline("running")
        fresh.load_state_dict(other)
        assert (fresh.value, fresh.steps) == (None, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"mode": "mean"}, "one of batch, running, situation, none"), ({"mode": "running", "rate": 0.0}, "rate 0.0"),
     ({"mode": "running", "scale_std": True}, "not 'running'")],
)  # fmt: skip
def test_a_baseline_that_cannot_be_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Baseline(**kwargs)  # type: ignore[arg-type]


def test_the_config_defaults_to_the_batch_baseline_and_refuses_what_would_not_train() -> None:
    cfg = load_config(None, [])
    assert (cfg.serve.learn_baseline, cfg.serve.learn_baseline_rate, cfg.serve.learn_baseline_std) == (
        "batch",
        0.1,
        False,
    )
    assert (
        load_config(None, ["serve.learn_baseline=running", "serve.learn_baseline_rate=0.25"]).serve.learn_baseline_rate
        == 0.25
    )
    refusals = {
        "serve.learn_baseline=mean": "serve.learn_baseline",
        "serve.learn_baseline_rate=0": "serve.learn_baseline_rate",
        "serve.learn_baseline_rate=1.5": "serve.learn_baseline_rate",
    }
    for override, key in refusals.items():
        with pytest.raises(ConfigError, match=key):
            load_config(None, [override])
    with pytest.raises(ConfigError, match=r"serve\.learn_batch=1 centres each turn on itself"):
        load_config(None, ["serve.learn_batch=1"])
    assert load_config(None, ["serve.learn_batch=1", "serve.learn_baseline=running"]).serve.learn_batch == 1
    assert load_config(None, ["serve.learn_batch=1", "serve.learn_signal=opd"]).serve.learn_batch == 1
    with pytest.raises(ConfigError, match=r"serve\.learn_baseline_std=true divides by the batch.s spread"):
        load_config(None, ["serve.learn_baseline=running", "serve.learn_baseline_std=true"])


def test_situation_centres_each_turn_on_the_other_recent_turns_of_its_situation() -> None:
    """A thanked first ask against the other first asks; after a re-query, where every recent turn failed,
    a failing turn carries nothing (the measured collapse: those turns were pushed down with nothing to
    push up beside them); a turn alone in its situation carries nothing either."""
    baseline = Baseline("situation")
    recent = {1: (0.5 - 0.5 * 3, 4), 2: (-0.5 * 6, 6), 3: (-0.5, 1)}  # 1 thanked + 3 failed; 6 failed; 1
    adv, mean = baseline.advantages([0.5, -0.5, -0.5, -0.5], [1, 1, 2, 3], recent)
    assert adv == pytest.approx([1.0, -1 / 3, 0.0, 0.0])  # +0.5 - (-0.5); -0.5 - (0.5 - 1.0) / 3
    assert mean == pytest.approx((-0.5 + -1 / 6 - 0.5 - 0.5) / 4)
    assert baseline.advantages([0.5], [4], recent) == ([0.0], 0.5)  # no recent turn of situation 4
    with pytest.raises(ValueError, match="situation"):
        baseline.advantages([0.5, -0.5])
    assert (
        load_config(None, ["serve.learn_baseline=situation", "serve.learn_batch=1"]).serve.learn_baseline == "situation"
    )
