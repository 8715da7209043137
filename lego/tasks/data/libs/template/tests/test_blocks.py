import pytest

from template import Template, TemplateSyntaxError, render


def test_if_true():
    assert render("{% if ok %}yes{% endif %}", ok=True) == "yes"


def test_if_false():
    assert render("{% if ok %}yes{% endif %}", ok=False) == ""


def test_if_else():
    assert render("{% if ok %}yes{% else %}no{% endif %}", ok=0) == "no"


def test_elif():
    src = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}"
    assert [render(src, n=i) for i in (1, 2, 3)] == ["one", "two", "many"]


def test_if_not():
    assert render("{% if not ok %}off{% endif %}", ok=False) == "off"


def test_if_and():
    assert render("{% if a and b %}both{% endif %}", a=1, b=0) == ""


def test_if_and_true():
    assert render("{% if a and b %}both{% endif %}", a=1, b=1) == "both"


def test_if_or():
    assert render("{% if a or b %}any{% endif %}", a=0, b=1) == "any"


def test_comparison_less():
    assert render("{% if n < 3 %}small{% endif %}", n=2) == "small"


def test_comparison_less_equal_boundary():
    assert render("{% if n <= 3 %}ok{% endif %}", n=3) == "ok"


def test_comparison_greater_boundary():
    assert render("{% if n > 3 %}big{% else %}not{% endif %}", n=3) == "not"


def test_comparison_greater_equal():
    assert render("{% if n >= 3 %}ok{% endif %}", n=4) == "ok"


def test_comparison_not_equal():
    assert render("{% if a != 'x' %}diff{% endif %}", a="y") == "diff"


def test_comparison_in():
    assert render("{% if 'b' in items %}has{% endif %}", items=["a", "b"]) == "has"


def test_if_missing_condition():
    with pytest.raises(TemplateSyntaxError):
        Template("{% if %}x{% endif %}")


def test_if_unclosed():
    with pytest.raises(TemplateSyntaxError, match="endif"):
        Template("{% if a %}x")


def test_for_loop():
    assert render("{% for x in xs %}[{{ x }}]{% endfor %}", xs=[1, 2, 3]) == "[1][2][3]"


def test_for_empty():
    assert render("{% for x in xs %}[{{ x }}]{% endfor %}", xs=[]) == ""


def test_for_missing_iterable():
    assert render("{% for x in nope %}[{{ x }}]{% endfor %}") == ""


def test_for_loop_index():
    assert render("{% for x in xs %}{{ loop.index }}{% endfor %}", xs="abc") == "123"


def test_for_loop_index0():
    assert render("{% for x in xs %}{{ loop.index0 }}{% endfor %}", xs="abc") == "012"


def test_for_loop_last():
    src = "{% for x in xs %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"
    assert render(src, xs=[1, 2, 3]) == "1,2,3"


def test_for_loop_first():
    src = "{% for x in xs %}{% if loop.first %}>{% endif %}{{ x }}{% endfor %}"
    assert render(src, xs=[1, 2]) == ">12"


def test_for_nested():
    src = "{% for r in rows %}{% for c in r %}{{ c }}{% endfor %};{% endfor %}"
    assert render(src, rows=[[1, 2], [3]]) == "12;3;"


def test_for_does_not_leak_variable():
    assert render("{% for x in xs %}{% endfor %}[{{ x }}]", xs=[1]) == "[]"


def test_for_bad_syntax():
    with pytest.raises(TemplateSyntaxError):
        Template("{% for x of xs %}{% endfor %}")


def test_unknown_tag():
    with pytest.raises(TemplateSyntaxError, match="unknown tag"):
        Template("{% include 'x' %}")


def test_stray_endif():
    with pytest.raises(TemplateSyntaxError):
        Template("a{% endif %}")


def test_empty_variable_tag():
    with pytest.raises(TemplateSyntaxError):
        Template("{{ }}")


def test_error_line_number():
    with pytest.raises(TemplateSyntaxError, match="line 3"):
        Template("a\nb\n{% bogus %}")


def test_unclosed_variable():
    with pytest.raises(TemplateSyntaxError):
        Template("hello {{ name")


def test_whitespace_control_left():
    assert render("a   {%- if 1 %}b{% endif %}") == "ab"


def test_whitespace_control_right():
    assert render("{% if 1 -%}   b{% endif %}") == "b"
