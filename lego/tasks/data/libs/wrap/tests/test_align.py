import pytest

from wrap import center, justify, ljust_lines, rjust_lines, truncate


def test_ljust():
    assert ljust_lines(["a", "bbb"], 4) == ["a   ", "bbb "]


def test_rjust():
    assert rjust_lines(["a", "bbb"], 4, ".") == ["...a", ".bbb"]


def test_center_even():
    assert center("ab", 6) == "  ab  "


def test_center_odd_extra_right():
    assert center("ab", 5, "*") == "*ab**"


def test_center_too_long():
    assert center("abcdef", 3) == "abcdef"


def test_justify_pads_lines():
    assert justify("aa bb cc dd", 9) == ["aa  bb cc", "dd"]


def test_justify_extra_spaces_go_left():
    assert justify("a b c d e", 6) == ["a  b c", "d e"]


def test_justify_lengths():
    lines = justify("the quick brown fox jumps over the lazy dog", 15)
    assert all(len(line) == 15 for line in lines[:-1])


def test_justify_single_word_line():
    assert justify("abcdef gh", 6) == ["abcdef", "gh"]


def test_justify_empty():
    assert justify("", 10) == []


def test_truncate_short_unchanged():
    assert truncate("hello  world", 20) == "hello world"


def test_truncate_at_word():
    assert truncate("hello big world", 12) == "hello big..."


def test_truncate_drops_partial_word():
    assert truncate("hello enormous world", 12) == "hello..."


def test_truncate_exact():
    assert truncate("hello world", 11) == "hello world"


def test_truncate_custom_placeholder():
    assert truncate("one two three four", 12, placeholder=" [..]") == "one two [..]"


def test_truncate_nothing_fits():
    assert truncate("abcdefghij", 5, placeholder=" ...") == "..."


def test_truncate_placeholder_too_long():
    with pytest.raises(ValueError):
        truncate("abcdefghij", 2)
