"""How a learner step's turns are chosen among the ready ones (:func:`lego.learn.batches.balanced_batch`).

Measured first (`lego bench use --signal reward`, 30 min, docs/use-reward30-e6a29ae.json): the person
thanked 15 sessions, whose attempts gave 70 turns scored +0.5 among ~1100 scored -0.5. Picking the
freshest turns and letting one turn that scored otherwise join took one or two thanked turns a step,
so a thanked attempt's turns trickled in one per step and 36 of the 70 went stale before they trained.
"""

from __future__ import annotations

import pytest

from lego.learn.batches import LearnableTurn, balanced_batch


def turn(n: int, score: float, version: int = 0) -> LearnableTurn:
    return LearnableTurn(
        session_id=f"s{n}", turn=n, thread="main", main=True, prompt_ids=[1], output_ids=[2], logprobs=[-0.1],
        versions=[version], score=score, judge="rules",
    )  # fmt: skip


def test_a_scarce_score_fills_half_the_batch_at_once() -> None:
    fresh = [turn(n, -0.5) for n in range(20)] + [turn(20 + n, 0.5) for n in range(5)]
    batch = balanced_batch(fresh, 8)
    assert [t.score for t in batch].count(0.5) == 4 and len(batch) == 8
    assert batch[0] is fresh[0]  # the freshest stays: the fidelity gate measures it
    assert {t.turn for t in batch if t.score == 0.5} == {20, 21, 22, 23}  # freshest first within a score
    assert {t.turn for t in batch if t.score == -0.5} == {0, 1, 2, 3}


def test_fewer_scarce_turns_than_half_are_all_taken() -> None:
    fresh = [turn(0, 0.5)] + [turn(n, -0.5) for n in range(1, 12)] + [turn(12, 1.0)]
    batch = balanced_batch(fresh, 6)
    scores = sorted(t.score for t in batch)
    assert scores == [-0.5, -0.5, -0.5, -0.5, 0.5, 1.0] and batch[0] is fresh[0]


def test_one_score_or_a_short_list_is_the_freshest_in_order() -> None:
    fresh = [turn(n, -0.5) for n in range(5)]
    assert balanced_batch(fresh, 3) == fresh[:3]
    assert balanced_batch(fresh, 9) == fresh
    assert balanced_batch([], 4) == []


def test_more_scores_than_slots_keep_the_freshest_turn() -> None:
    fresh = [turn(0, -0.5)] + [turn(n, n / 10) for n in range(1, 6)]
    batch = balanced_batch(fresh, 2)
    assert batch[0] is fresh[0] and len(batch) == 2 and batch[1].score != -0.5


@pytest.mark.parametrize("size", [1, 2, 5, 8])
def test_never_a_turn_twice_never_more_than_asked(size: int) -> None:
    fresh = [turn(n, (-0.5, 0.5, 0.0)[n % 3 if n < 7 else 0]) for n in range(15)]
    batch = balanced_batch(fresh, size)
    assert len(batch) == min(size, len(fresh)) and len({id(t) for t in batch}) == len(batch)
