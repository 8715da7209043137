import pytest

from lrucache import LRUCache


def test_get_missing_returns_default():
    assert LRUCache(2).get("x", 7) == 7


def test_put_then_get():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.get("a") == 1


def test_len():
    c = LRUCache(5)
    c.put("a", 1)
    c.put("b", 2)
    assert len(c) == 2


def test_evicts_least_recent():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("c", 3)
    assert "a" not in c


def test_keeps_recent_after_eviction():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("c", 3)
    assert c.keys() == ["c", "b"]


def test_get_refreshes_recency():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert c.keys() == ["c", "a"]


def test_peek_does_not_refresh():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.peek("a")
    c.put("c", 3)
    assert "a" not in c


def test_peek_default():
    assert LRUCache(2).peek("zz", "d") == "d"


def test_replace_value():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("a", 5)
    assert c.get("a") == 5 and len(c) == 1


def test_replace_moves_to_front():
    c = LRUCache(3)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 3)
    assert c.keys() == ["a", "b"]


def test_capacity_one():
    c = LRUCache(1)
    c.put("a", 1)
    c.put("b", 2)
    assert c.items() == [("b", 2)]


def test_zero_capacity_rejected():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_pop():
    c = LRUCache(3)
    c.put("a", 1)
    c.put("b", 2)
    assert c.pop("a") == 1 and c.keys() == ["b"]


def test_pop_missing():
    assert LRUCache(3).pop("nope", -1) == -1


def test_pop_last_then_put():
    c = LRUCache(3)
    c.put("a", 1)
    c.pop("a")
    c.put("b", 2)
    assert c.keys() == ["b"] and c.oldest() == "b"


def test_oldest():
    c = LRUCache(3)
    c.put("a", 1)
    c.put("b", 2)
    assert c.oldest() == "a"


def test_oldest_empty():
    assert LRUCache(3).oldest() is None


def test_items_order():
    c = LRUCache(3)
    c.put("a", 1)
    c.put("b", 2)
    assert c.items() == [("b", 2), ("a", 1)]


def test_clear():
    c = LRUCache(3)
    c.put("a", 1)
    c.clear()
    assert len(c) == 0 and c.keys() == [] and c.weight == 0


def test_resize_evicts():
    c = LRUCache(3)
    for k in "abc":
        c.put(k, 0)
    c.resize(1)
    assert c.keys() == ["c"]


def test_resize_invalid():
    with pytest.raises(ValueError):
        LRUCache(3).resize(0)
