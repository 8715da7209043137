import pytest

from jsonpointer import PointerError, add, remove, replace, walk


def test_add_member():
    assert add({"a": 1}, "/b", 2) == {"a": 1, "b": 2}


def test_add_does_not_mutate():
    doc = {"a": [1]}
    add(doc, "/a/0", 0)
    assert doc == {"a": [1]}


def test_add_array_insert():
    assert add({"a": [1, 3]}, "/a/1", 2) == {"a": [1, 2, 3]}


def test_add_array_end_dash():
    assert add({"a": [1]}, "/a/-", 2) == {"a": [1, 2]}


def test_add_array_at_length():
    assert add({"a": [1]}, "/a/1", 2) == {"a": [1, 2]}


def test_add_array_past_end():
    with pytest.raises(PointerError):
        add({"a": [1]}, "/a/3", 2)


def test_add_root_replaces():
    assert add({"a": 1}, "", [1]) == [1]


def test_add_into_scalar():
    with pytest.raises(PointerError):
        add({"a": 1}, "/a/b", 2)


def test_remove_member():
    assert remove({"a": 1, "b": 2}, "/a") == {"b": 2}


def test_remove_element():
    assert remove([1, 2, 3], "/0") == [2, 3]


def test_remove_last_element():
    assert remove([1, 2, 3], "/2") == [1, 2]


def test_remove_missing():
    with pytest.raises(PointerError):
        remove({"a": 1}, "/b")


def test_remove_root():
    with pytest.raises(PointerError):
        remove({"a": 1}, "")


def test_replace_member():
    assert replace({"a": 1}, "/a", 5) == {"a": 5}


def test_replace_element():
    assert replace([1, 2], "/1", 9) == [1, 9]


def test_replace_missing():
    with pytest.raises(PointerError):
        replace({"a": 1}, "/b", 5)


def test_replace_root():
    assert replace({"a": 1}, "", "x") == "x"


def test_walk_all():
    assert walk({"a": [1, 2]}) == [("", {"a": [1, 2]}), ("/a", [1, 2]), ("/a/0", 1), ("/a/1", 2)]


def test_walk_leaves():
    assert walk({"a": [1, {"b/c": 2}]}, leaves_only=True) == [("/a/0", 1), ("/a/1/b~1c", 2)]


def test_walk_scalar():
    assert walk(5) == [("", 5)]
