"""Roman numerals: encode, decode, validate and do arithmetic on them."""

from roman.arith import add, compare, multiply, numeral_range, sort_numerals, subtract
from roman.codec import MAX_VALUE, MIN_VALUE, RomanError, from_roman, is_valid, to_roman

__all__ = [
    "MAX_VALUE",
    "MIN_VALUE",
    "RomanError",
    "add",
    "compare",
    "from_roman",
    "is_valid",
    "multiply",
    "numeral_range",
    "sort_numerals",
    "subtract",
    "to_roman",
]
