import pytest

from lrucache import CacheStats, LRUCache


def test_weighted_eviction():
    c = LRUCache(10, weigh=len)
    c.put("a", "xxxx")
    c.put("b", "yyyy")
    c.put("c", "zzzz")
    assert c.keys() == ["c", "b"] and c.weight == 8


def test_weight_exact_capacity_fits():
    c = LRUCache(8, weigh=len)
    c.put("a", "xxxx")
    c.put("b", "yyyy")
    assert len(c) == 2


def test_too_heavy_rejected():
    c = LRUCache(3, weigh=len)
    with pytest.raises(ValueError):
        c.put("a", "xxxx")


def test_weight_after_replace():
    c = LRUCache(10, weigh=len)
    c.put("a", "xxxx")
    c.put("a", "xx")
    assert c.weight == 2


def test_weight_after_pop():
    c = LRUCache(10, weigh=len)
    c.put("a", "xxxx")
    c.put("b", "xx")
    c.pop("a")
    assert c.weight == 2


def test_on_evict_called():
    seen = []
    c = LRUCache(1, on_evict=lambda k, v: seen.append((k, v)))
    c.put("a", 1)
    c.put("b", 2)
    assert seen == [("a", 1)]


def test_on_evict_not_called_on_pop():
    seen = []
    c = LRUCache(2, on_evict=lambda k, v: seen.append(k))
    c.put("a", 1)
    c.pop("a")
    assert seen == []


def test_stats_hits_misses():
    c = LRUCache(2)
    c.put("a", 1)
    c.get("a")
    c.get("b")
    c.get("a")
    assert (c.stats.hits, c.stats.misses) == (2, 1)


def test_stats_evictions():
    c = LRUCache(1)
    c.put("a", 1)
    c.put("b", 1)
    c.put("c", 1)
    assert c.stats.evictions == 2


def test_hit_rate():
    c = LRUCache(2)
    c.put("a", 1)
    c.get("a")
    c.get("x")
    c.get("y")
    c.get("a")
    assert c.stats.hit_rate == 0.5


def test_hit_rate_no_lookups():
    assert CacheStats().hit_rate == 0.0


def test_lookups():
    s = CacheStats()
    s.hits = 3
    s.misses = 4
    assert s.lookups == 7


def test_peek_not_counted():
    c = LRUCache(2)
    c.put("a", 1)
    c.peek("a")
    assert c.stats.lookups == 0
