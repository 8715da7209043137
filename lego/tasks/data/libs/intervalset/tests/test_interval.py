import pytest

from intervalset import Interval, IntervalError


def test_length():
    assert Interval(2, 7).length == 5


def test_empty_interval():
    assert Interval(3, 3).is_empty()


def test_nonempty_interval():
    assert not Interval(3, 4).is_empty()


def test_reversed_raises():
    with pytest.raises(IntervalError):
        Interval(5, 1)


def test_contains_start():
    assert 2 in Interval(2, 5)


def test_excludes_end():
    assert 5 not in Interval(2, 5)


def test_contains_middle():
    assert 3.5 in Interval(2, 5)


def test_excludes_below():
    assert 1 not in Interval(2, 5)


def test_overlaps_true():
    assert Interval(0, 5).overlaps(Interval(4, 8))


def test_overlaps_adjacent_false():
    assert not Interval(0, 5).overlaps(Interval(5, 8))


def test_touches_adjacent():
    assert Interval(0, 5).touches(Interval(5, 8))


def test_touches_disjoint_false():
    assert not Interval(0, 4).touches(Interval(5, 8))


def test_intersection():
    assert Interval(0, 5).intersection(Interval(3, 9)) == Interval(3, 5)


def test_intersection_none():
    assert Interval(0, 3).intersection(Interval(3, 9)) is None


def test_hull():
    assert Interval(0, 2).hull(Interval(5, 9)) == Interval(0, 9)


def test_shift():
    assert Interval(1, 4).shift(10) == Interval(11, 14)


def test_expand():
    assert Interval(5, 10).expand(2) == Interval(3, 12)


def test_expand_negative():
    assert Interval(0, 10).expand(-3) == Interval(3, 7)


def test_expand_collapses_to_middle():
    assert Interval(0, 10).expand(-8) == Interval(5, 5)


def test_split():
    assert Interval(0, 10).split(4) == (Interval(0, 4), Interval(4, 10))


def test_split_at_edge_raises():
    with pytest.raises(IntervalError):
        Interval(0, 10).split(0)


def test_ordering():
    assert sorted([Interval(3, 4), Interval(1, 9), Interval(1, 2)]) == [Interval(1, 2), Interval(1, 9), Interval(3, 4)]


def test_repr():
    assert repr(Interval(1, 2)) == "Interval(1, 2)"


def test_hash_equal():
    assert hash(Interval(1, 2)) == hash(Interval(1, 2))
