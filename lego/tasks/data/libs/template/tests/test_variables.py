import pytest

from template import Template, TemplateRuntimeError, render


def test_plain_text():
    assert render("hello") == "hello"


def test_variable():
    assert render("hi {{ name }}!", name="Ada") == "hi Ada!"


def test_variable_no_spaces():
    assert render("{{name}}", name="x") == "x"


def test_missing_variable_empty():
    assert render("[{{ nope }}]") == "[]"


def test_none_renders_empty():
    assert render("[{{ v }}]", v=None) == "[]"


def test_zero_renders():
    assert render("{{ v }}", v=0) == "0"


def test_dotted_dict():
    assert render("{{ user.name }}", user={"name": "Bo"}) == "Bo"


def test_dotted_list_index():
    assert render("{{ items.1 }}", items=["a", "b"]) == "b"


def test_dotted_list_out_of_range():
    assert render("[{{ items.5 }}]", items=["a"]) == "[]"


def test_dotted_attribute():
    class P:
        x = 3

    assert render("{{ p.x }}", p=P()) == "3"


def test_dotted_missing_part():
    assert render("[{{ user.age }}]", user={"name": "Bo"}) == "[]"


def test_strict_missing_raises():
    with pytest.raises(TemplateRuntimeError):
        Template("{{ nope }}", strict=True).render()


def test_strict_missing_part_raises():
    with pytest.raises(TemplateRuntimeError):
        Template("{{ user.age }}", strict=True).render(user={})


def test_string_literal():
    assert render("{{ 'hi' }}") == "hi"


def test_int_literal():
    assert render("{{ 42 }}") == "42"


def test_negative_int_literal():
    assert render("{{ -3 }}") == "-3"


def test_context_and_kwargs_merge():
    assert Template("{{ a }}{{ b }}").render({"a": 1, "b": 2}, b=3) == "13"


def test_comment_dropped():
    assert render("a{# note #}b") == "ab"


def test_multiline_comment():
    assert render("a{# one\ntwo #}b") == "ab"


def test_autoescape():
    assert Template("{{ v }}", autoescape=True).render(v="<b>") == "&lt;b&gt;"


def test_no_autoescape_by_default():
    assert render("{{ v }}", v="<b>") == "<b>"


def test_autoescape_not_double():
    assert Template("{{ v|escape }}", autoescape=True).render(v="&") == "&amp;"
