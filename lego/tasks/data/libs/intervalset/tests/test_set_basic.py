from intervalset import Interval, IntervalSet


def test_merges_overlapping():
    assert IntervalSet([(0, 5), (3, 8)]).intervals == [Interval(0, 8)]


def test_merges_adjacent():
    assert IntervalSet([(0, 5), (5, 8)]).intervals == [Interval(0, 8)]


def test_keeps_disjoint_sorted():
    assert IntervalSet([(10, 12), (0, 2)]).intervals == [Interval(0, 2), Interval(10, 12)]


def test_drops_empty():
    assert IntervalSet([(3, 3), (5, 6)]).intervals == [Interval(5, 6)]


def test_nested_merge():
    assert IntervalSet([(0, 10), (2, 3)]).intervals == [Interval(0, 10)]


def test_len():
    assert len(IntervalSet([(0, 1), (2, 3), (4, 5)])) == 3


def test_bool_empty():
    assert not IntervalSet()


def test_contains():
    s = IntervalSet([(0, 2), (4, 6), (8, 10)])
    assert 5 in s


def test_contains_gap():
    s = IntervalSet([(0, 2), (4, 6), (8, 10)])
    assert 3 not in s


def test_contains_end_excluded():
    s = IntervalSet([(0, 2), (4, 6), (8, 10)])
    assert 10 not in s


def test_contains_first_start():
    s = IntervalSet([(0, 2), (4, 6), (8, 10)])
    assert 0 in s


def test_total_length():
    assert IntervalSet([(0, 2), (4, 7)]).total_length == 5


def test_bounds():
    assert IntervalSet([(4, 7), (0, 2)]).bounds() == Interval(0, 7)


def test_bounds_empty():
    assert IntervalSet().bounds() is None


def test_repr():
    assert repr(IntervalSet([(0, 2), (4, 7)])) == "IntervalSet([0, 2), [4, 7))"


def test_equality():
    assert IntervalSet([(0, 3)]) == IntervalSet([(0, 1), (1, 3)])


def test_gaps():
    assert IntervalSet([(0, 2), (4, 6), (9, 10)]).gaps() == [Interval(2, 4), Interval(6, 9)]


def test_largest():
    assert IntervalSet([(0, 2), (4, 9), (10, 11)]).largest() == Interval(4, 9)


def test_largest_tie_first():
    assert IntervalSet([(0, 3), (5, 8)]).largest() == Interval(0, 3)


def test_largest_empty():
    assert IntervalSet().largest() is None
