from lrucache import memoize


def test_memoize_caches():
    calls = []

    @memoize()
    def square(x):
        calls.append(x)
        return x * x

    assert square(4) == 16 and square(4) == 16 and calls == [4]


def test_memoize_kwargs():
    calls = []

    @memoize()
    def f(a, b=1):
        calls.append((a, b))
        return a + b

    f(1, b=2)
    f(1, b=2)
    assert calls == [(1, 2)]


def test_memoize_kwargs_distinct_from_positional():
    calls = []

    @memoize()
    def f(a, b=1):
        calls.append((a, b))
        return a + b

    f(1, 2)
    f(1, b=2)
    assert len(calls) == 2


def test_memoize_maxsize_evicts():
    calls = []

    @memoize(maxsize=2)
    def f(x):
        calls.append(x)
        return x

    for x in (1, 2, 3, 1):
        f(x)
    assert calls == [1, 2, 3, 1]


def test_memoize_untyped_shares():
    calls = []

    @memoize()
    def f(x):
        calls.append(x)
        return x

    f(1)
    f(1.0)
    assert len(calls) == 1


def test_memoize_typed_separates():
    calls = []

    @memoize(typed=True)
    def f(x):
        calls.append(x)
        return x

    f(1)
    f(1.0)
    assert len(calls) == 2


def test_memoize_caches_none():
    calls = []

    @memoize()
    def f(x):
        calls.append(x)

    f(1)
    f(1)
    assert calls == [1]


def test_cache_clear():
    calls = []

    @memoize()
    def f(x):
        calls.append(x)
        return x

    f(1)
    f.cache_clear()
    f(1)
    assert calls == [1, 1]


def test_wraps_name():
    @memoize()
    def named(x):
        return x

    assert named.__name__ == "named"


def test_cache_stats_exposed():
    @memoize()
    def f(x):
        return x

    f(1)
    f(1)
    assert f.cache.stats.hits == 1
