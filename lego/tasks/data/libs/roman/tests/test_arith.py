import pytest

from roman import RomanError, add, compare, multiply, numeral_range, sort_numerals, subtract


def test_add_two():
    assert add("X", "V") == "XV"


def test_add_many():
    assert add("I", "II", "III", "IV") == "X"


def test_add_single():
    assert add("XLII") == "XLII"


def test_add_requires_argument():
    with pytest.raises(RomanError):
        add()


def test_add_overflow():
    with pytest.raises(RomanError):
        add("MMM", "M")


def test_add_reaches_max():
    assert add("MMM", "CMXCIX") == "MMMCMXCIX"


def test_subtract():
    assert subtract("X", "IV") == "VI"


def test_subtract_to_one():
    assert subtract("III", "II") == "I"


def test_subtract_to_zero_rejected():
    with pytest.raises(RomanError):
        subtract("V", "V")


def test_multiply():
    assert multiply("XII", "XII") == "CXLIV"


def test_multiply_overflow():
    with pytest.raises(RomanError):
        multiply("C", "XL")


def test_compare_less():
    assert compare("IV", "V") == -1


def test_compare_greater():
    assert compare("M", "CM") == 1


def test_compare_equal():
    assert compare("xx", "XX") == 0


def test_sort_numerals():
    assert sort_numerals(["X", "II", "L", "IV"]) == ["II", "IV", "X", "L"]


def test_sort_numerals_reverse():
    assert sort_numerals(["X", "II", "L"], reverse=True) == ["L", "X", "II"]


def test_numeral_range():
    assert numeral_range("I", "V") == ["I", "II", "III", "IV"]


def test_numeral_range_step():
    assert numeral_range("I", "X", 3) == ["I", "IV", "VII"]


def test_numeral_range_backwards():
    assert numeral_range("V", "I", -2) == ["V", "III"]


def test_numeral_range_zero_step():
    with pytest.raises(RomanError):
        numeral_range("I", "V", 0)
