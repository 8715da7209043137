import pytest

from jsonpointer import JsonPointer, PointerError, escape, unescape

DOC = {"foo": ["bar", "baz"], "": 0, "a/b": 1, "m~n": 8, "nested": {"list": [{"x": 1}, {"x": 2}]}}


def test_escape():
    assert escape("a/b~c") == "a~1b~0c"


def test_unescape():
    assert unescape("a~1b~0c") == "a/b~c"


def test_unescape_order():
    assert unescape("~01") == "~1"


def test_unescape_invalid():
    with pytest.raises(PointerError):
        unescape("a~2")


def test_unescape_trailing_tilde():
    with pytest.raises(PointerError):
        unescape("a~")


def test_parse_tokens():
    assert JsonPointer("/foo/0").tokens == ("foo", "0")


def test_parse_root():
    assert JsonPointer("").tokens == ()


def test_parse_requires_slash():
    with pytest.raises(PointerError):
        JsonPointer("foo")


def test_str_roundtrip():
    assert str(JsonPointer("/a~1b/m~0n")) == "/a~1b/m~0n"


def test_resolve_root():
    assert JsonPointer("").resolve(DOC) is DOC


def test_resolve_list_item():
    assert JsonPointer("/foo/1").resolve(DOC) == "baz"


def test_resolve_empty_key():
    assert JsonPointer("/").resolve(DOC) == 0


def test_resolve_escaped_slash():
    assert JsonPointer("/a~1b").resolve(DOC) == 1


def test_resolve_escaped_tilde():
    assert JsonPointer("/m~0n").resolve(DOC) == 8


def test_resolve_nested():
    assert JsonPointer("/nested/list/1/x").resolve(DOC) == 2


def test_resolve_missing_key():
    with pytest.raises(PointerError):
        JsonPointer("/nope").resolve(DOC)


def test_resolve_index_out_of_range():
    with pytest.raises(PointerError):
        JsonPointer("/foo/2").resolve(DOC)


def test_resolve_leading_zero_index():
    with pytest.raises(PointerError):
        JsonPointer("/foo/01").resolve(DOC)


def test_resolve_dash_is_not_an_element():
    with pytest.raises(PointerError):
        JsonPointer("/foo/-").resolve(DOC)


def test_resolve_into_scalar():
    with pytest.raises(PointerError):
        JsonPointer("/foo/0/x").resolve(DOC)


def test_resolve_default():
    assert JsonPointer("/nope").resolve(DOC, None) is None


def test_exists_true():
    assert JsonPointer("/foo/0").exists(DOC)


def test_exists_false():
    assert not JsonPointer("/foo/5").exists(DOC)


def test_parent():
    assert JsonPointer("/a/b/c").parent == JsonPointer("/a/b")


def test_root_parent_raises():
    with pytest.raises(PointerError):
        JsonPointer("").parent


def test_div():
    assert str(JsonPointer("/a") / "b/c") == "/a/b~1c"


def test_is_prefix_of():
    assert JsonPointer("/a").is_prefix_of(JsonPointer("/a/b"))


def test_is_not_prefix_of():
    assert not JsonPointer("/a/b").is_prefix_of(JsonPointer("/a"))
