import pytest

from wrap import fill, wrap


def test_wrap_short_text_one_line():
    assert wrap("hello world", 20) == ["hello world"]


def test_wrap_breaks_at_space():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_wrap_exact_width_fits():
    assert wrap("abc def", 7) == ["abc def"]


def test_wrap_collapses_whitespace():
    assert wrap("a   b\n\tc", 10) == ["a b c"]


def test_wrap_empty():
    assert wrap("", 10) == []


def test_wrap_whitespace_only():
    assert wrap("   \n ", 10) == []


def test_wrap_long_word_broken():
    assert wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"]


def test_wrap_long_word_kept():
    assert wrap("ab abcdefghij cd", 5, break_long_words=False) == ["ab", "abcdefghij", "cd"]


def test_wrap_initial_indent():
    assert wrap("aaa bbb ccc", 8, initial_indent="> ") == ["> aaa", "bbb ccc"]


def test_wrap_subsequent_indent():
    assert wrap("aaa bbb ccc ddd", 8, subsequent_indent="  ") == ["aaa bbb", "  ccc", "  ddd"]


def test_wrap_invalid_width():
    with pytest.raises(ValueError):
        wrap("x", 0)


def test_wrap_indent_too_wide():
    with pytest.raises(ValueError):
        wrap("x", 2, initial_indent="   ")


def test_wrap_lines_never_exceed_width():
    text = "the quick brown fox jumps over the lazy dog " * 5
    assert all(len(line) <= 12 for line in wrap(text, 12))


def test_wrap_keeps_all_words():
    text = "one two three four five six"
    assert " ".join(wrap(text, 9)) == text


def test_fill():
    assert fill("aaa bbb ccc", 7) == "aaa bbb\nccc"


def test_fill_default_width():
    assert fill("word " * 20).count("\n") == 1
