import pytest

from template import TemplateRuntimeError, render


def test_upper():
    assert render("{{ v|upper }}", v="abc") == "ABC"


def test_lower():
    assert render("{{ v|lower }}", v="AbC") == "abc"


def test_title():
    assert render("{{ v|title }}", v="hello world") == "Hello World"


def test_strip():
    assert render("[{{ v|strip }}]", v="  x ") == "[x]"


def test_chained_filters():
    assert render("{{ v|strip|upper }}", v=" ab ") == "AB"


def test_length():
    assert render("{{ v|length }}", v=[1, 2, 3]) == "3"


def test_first_last():
    assert render("{{ v|first }}-{{ v|last }}", v=[1, 2, 3]) == "1-3"


def test_reverse():
    assert render("{{ v|reverse }}", v="abc") == "cba"


def test_escape():
    assert render("{{ v|escape }}", v="<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"


def test_truncate_default():
    assert render("{{ v|truncate }}", v="abcdefghijkl") == "abcdefghi…"


def test_truncate_arg():
    assert render("{{ v|truncate:4 }}", v="abcdefghijkl") == "abc…"


def test_truncate_short_unchanged():
    assert render("{{ v|truncate:4 }}", v="abcd") == "abcd"


def test_default_used():
    assert render("{{ v|default:'n/a' }}", v="") == "n/a"


def test_default_for_missing():
    assert render("{{ nope|default:'n/a' }}") == "n/a"


def test_default_not_used():
    assert render("{{ v|default:'n/a' }}", v=0) == "0"


def test_join_default_sep():
    assert render("{{ v|join }}", v=[1, 2, 3]) == "1, 2, 3"


def test_join_custom_sep():
    assert render("{{ v|join:'-' }}", v=["a", "b"]) == "a-b"


def test_pluralize_one():
    assert render("item{{ n|pluralize }}", n=1) == "item"


def test_pluralize_many():
    assert render("item{{ n|pluralize }}", n=2) == "items"


def test_pluralize_zero():
    assert render("item{{ n|pluralize }}", n=0) == "items"


def test_pluralize_suffix():
    assert render("box{{ n|pluralize:'es' }}", n=3) == "boxes"


def test_unknown_filter():
    with pytest.raises(TemplateRuntimeError):
        render("{{ v|shout }}", v="x")
