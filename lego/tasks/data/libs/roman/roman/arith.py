"""Arithmetic and ordering on Roman numerals; results are canonical numerals."""

from roman.codec import MAX_VALUE, MIN_VALUE, RomanError, from_roman, to_roman


def add(*numerals):
    """Sum of one or more numerals."""
    if len(numerals) < 1:
        raise RomanError("add() needs at least one numeral")
    total = sum(from_roman(n) for n in numerals)
    if total > MAX_VALUE:
        raise RomanError(f"sum {total} exceeds {MAX_VALUE}")
    return to_roman(total)


def subtract(left, right):
    """``left - right``; the result must stay positive."""
    difference = from_roman(left) - from_roman(right)
    if difference < MIN_VALUE:
        raise RomanError(f"{left} - {right} is not positive")
    return to_roman(difference)


def multiply(left, right):
    """``left * right`` as a numeral."""
    product = from_roman(left) * from_roman(right)
    if product > MAX_VALUE:
        raise RomanError(f"product {product} exceeds {MAX_VALUE}")
    return to_roman(product)


def compare(left, right):
    """-1, 0 or 1 as ``left`` is less than, equal to or greater than ``right``."""
    a = from_roman(left)
    b = from_roman(right)
    if a < b:
        return -1
    if a > b:
        return 1
    return 0


def sort_numerals(numerals, reverse=False):
    """Numerals sorted by value (ascending unless ``reverse``)."""
    return sorted(numerals, key=from_roman, reverse=reverse)


def numeral_range(start, stop, step=1):
    """Numerals from ``start`` up to but excluding ``stop``, like ``range``."""
    if step == 0:
        raise RomanError("step must not be zero")
    first = from_roman(start)
    last = from_roman(stop)
    return [to_roman(value) for value in range(first, last, step)]
