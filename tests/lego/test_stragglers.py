"""The straggler rule on its own (the real path is tests/redteam/test_relabel.py): nothing is cut before
half the batch has ended, then whatever runs past ``multiple`` x the median of the ended rollouts is
cut once, and a cut rollout's own duration never enters the median."""

from __future__ import annotations

import pytest

from lego.conductor.stragglers import StragglerWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cuts_only_after_half_the_batch_past_the_multiple_of_the_median():
    clock, cuts = Clock(), []
    watch = StragglerWatch(lambda sid, why: cuts.append((sid, why)) or True, 3.0, 4, clock=clock)
    for sid in "abcd":
        watch.started(sid)
    clock.now = 10.0
    watch.ended("a")
    clock.now = 100.0  # far past 3 x 10 s, but only 1 of 4 ended: no median yet
    assert watch.limit_s() is None and watch.check() == [] and cuts == []
    clock.now = 20.0
    watch.ended("b")  # the median of 10 s and 20 s is 15 s: the limit is 45 s
    assert watch.limit_s() == pytest.approx(45.0)
    clock.now = 44.0
    assert watch.check() == []
    clock.now = 46.0
    assert watch.check() == ["c", "d"]
    assert [sid for sid, _ in cuts] == ["c", "d"] and "3 x the median" in cuts[0][1]
    assert watch.check() == []  # each session is cut once
    clock.now = 60.0
    watch.ended("c")  # a cut rollout's duration does not stretch the median
    assert watch.limit_s() == pytest.approx(45.0)


def test_a_session_the_proxy_no_longer_has_is_not_counted_as_cut():
    clock = Clock()
    watch = StragglerWatch(lambda sid, why: False, 2.0, 2, clock=clock)
    watch.started("a")
    watch.started("b")
    clock.now = 1.0
    watch.ended("a")
    clock.now = 5.0
    assert watch.check() == [] and watch.cut_sessions == {}


def test_multiple_zero_is_off_and_a_negative_one_refused():
    clock, cuts = Clock(), []
    with StragglerWatch(lambda sid, why: cuts.append(sid) or True, 0.0, 2, clock=clock) as off:
        off.started("a")
        off.started("b")
        clock.now = 1.0
        off.ended("a")
        clock.now = 1000.0
        assert off.limit_s() is None and off.check() == [] and cuts == [] and off._thread is None
    with pytest.raises(ValueError, match="multiple must be 0 \\(off\\) or positive"):
        StragglerWatch(lambda sid, why: True, -1.0, 4)
