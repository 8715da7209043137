import pytest

from roman import RomanError, from_roman, is_valid, to_roman


@pytest.mark.parametrize(
    ("text", "expected"),
    [("I", 1), ("IV", 4), ("IX", 9), ("XL", 40), ("XC", 90), ("CD", 400), ("CM", 900),
     ("MCMXCIV", 1994), ("MMMCMXCIX", 3999), ("LXXXVIII", 88)],
)
def test_from_roman_known_values(text, expected):
    assert from_roman(text) == expected


def test_from_roman_lowercase():
    assert from_roman("xiv") == 14


def test_from_roman_strips_whitespace():
    assert from_roman("  XII \n") == 12


def test_from_roman_rejects_empty():
    with pytest.raises(RomanError):
        from_roman("   ")


def test_from_roman_rejects_bad_character():
    with pytest.raises(RomanError, match="invalid character"):
        from_roman("XIZ")


def test_from_roman_strict_rejects_iiii():
    with pytest.raises(RomanError):
        from_roman("IIII")


def test_from_roman_loose_accepts_iiii():
    assert from_roman("IIII", strict=False) == 4


def test_from_roman_loose_accepts_ic():
    assert from_roman("IC", strict=False) == 99


def test_from_roman_strict_rejects_ic():
    with pytest.raises(RomanError):
        from_roman("IC")


def test_from_roman_rejects_non_string():
    with pytest.raises(RomanError):
        from_roman(12)


def test_roundtrip_all_values():
    for number in range(1, 4000):
        assert from_roman(to_roman(number)) == number


def test_is_valid_true():
    assert is_valid("MMXX") is True


def test_is_valid_false_for_noncanonical():
    assert is_valid("VV") is False


def test_is_valid_false_for_garbage():
    assert is_valid("hello") is False
