from intervalset import Interval, IntervalSet


def test_union():
    assert IntervalSet([(0, 2)]).union(IntervalSet([(1, 5)])) == IntervalSet([(0, 5)])


def test_intersection():
    a = IntervalSet([(0, 5), (10, 15)])
    b = IntervalSet([(3, 12)])
    assert a.intersection(b).intervals == [Interval(3, 5), Interval(10, 12)]


def test_intersection_disjoint():
    assert not IntervalSet([(0, 2)]).intersection(IntervalSet([(2, 4)]))


def test_intersection_many():
    a = IntervalSet([(0, 2), (3, 5), (6, 8)])
    b = IntervalSet([(1, 7)])
    assert a.intersection(b).intervals == [Interval(1, 2), Interval(3, 5), Interval(6, 7)]


def test_difference_middle():
    assert IntervalSet([(0, 10)]).difference(IntervalSet([(3, 5)])).intervals == [Interval(0, 3), Interval(5, 10)]


def test_difference_left_edge():
    assert IntervalSet([(0, 10)]).difference(IntervalSet([(0, 4)])).intervals == [Interval(4, 10)]


def test_difference_everything():
    assert not IntervalSet([(2, 4)]).difference(IntervalSet([(0, 10)]))


def test_difference_no_overlap():
    assert IntervalSet([(0, 2)]).difference(IntervalSet([(5, 6)])) == IntervalSet([(0, 2)])


def test_difference_multiple_cuts():
    result = IntervalSet([(0, 10)]).difference(IntervalSet([(1, 2), (4, 5)]))
    assert result.intervals == [Interval(0, 1), Interval(2, 4), Interval(5, 10)]


def test_complement():
    assert IntervalSet([(2, 4)]).complement(0, 6).intervals == [Interval(0, 2), Interval(4, 6)]


def test_add():
    assert IntervalSet([(0, 2)]).add(2, 4) == IntervalSet([(0, 4)])


def test_remove():
    assert IntervalSet([(0, 6)]).remove(2, 4).intervals == [Interval(0, 2), Interval(4, 6)]


def test_union_is_immutable():
    a = IntervalSet([(0, 1)])
    a.union(IntervalSet([(5, 6)]))
    assert a.intervals == [Interval(0, 1)]
