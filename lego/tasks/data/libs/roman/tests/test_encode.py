import pytest

from roman import RomanError, to_roman


@pytest.mark.parametrize(
    ("number", "expected"),
    [(1, "I"), (3, "III"), (4, "IV"), (5, "V"), (9, "IX"), (14, "XIV"), (40, "XL"), (44, "XLIV"),
     (90, "XC"), (400, "CD"), (900, "CM"), (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX")],
)
def test_to_roman_known_values(number, expected):
    assert to_roman(number) == expected


def test_to_roman_zero_rejected():
    with pytest.raises(RomanError):
        to_roman(0)


def test_to_roman_negative_rejected():
    with pytest.raises(RomanError):
        to_roman(-5)


def test_to_roman_too_large_rejected():
    with pytest.raises(RomanError):
        to_roman(4000)


def test_to_roman_max_allowed():
    assert to_roman(3999) == "MMMCMXCIX"


def test_to_roman_min_allowed():
    assert to_roman(1) == "I"


def test_to_roman_rejects_float():
    with pytest.raises(RomanError):
        to_roman(3.0)


def test_to_roman_rejects_bool():
    with pytest.raises(RomanError):
        to_roman(True)


def test_to_roman_repeats_thousands():
    assert to_roman(3000) == "MMM"


def test_to_roman_error_mentions_range():
    with pytest.raises(RomanError, match="out of range"):
        to_roman(5000)
