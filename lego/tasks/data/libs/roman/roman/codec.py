"""Conversion between integers and standard Roman numerals (1..3999)."""

MIN_VALUE = 1
MAX_VALUE = 3999

_PAIRS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]

_SYMBOLS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


class RomanError(ValueError):
    """Raised for values or strings that are not valid Roman numerals."""


def to_roman(number):
    """Return the canonical Roman numeral for ``number``."""
    if not isinstance(number, int) or isinstance(number, bool):
        raise RomanError(f"expected an integer, got {type(number).__name__}")
    if number < MIN_VALUE or number > MAX_VALUE:
        raise RomanError(f"{number} is out of range {MIN_VALUE}..{MAX_VALUE}")
    parts = []
    remaining = number
    for value, symbol in _PAIRS:
        count = remaining // value
        if count:
            parts.append(symbol * count)
            remaining -= value * count
    return "".join(parts)


def _decode_loose(text):
    """Sum symbols with the subtractive rule, without checking canonical form."""
    total = 0
    previous = 0
    for char in reversed(text):
        value = _SYMBOLS.get(char)
        if value is None:
            raise RomanError(f"invalid character {char!r} in {text!r}")
        if value < previous:
            total -= value
        else:
            total += value
            previous = value
    return total


def from_roman(text, strict=True):
    """Return the integer value of a Roman numeral.

    Lowercase input and surrounding whitespace are accepted. With ``strict`` the numeral must be in
    canonical form (``IIII`` and ``IC`` are rejected); otherwise any additive/subtractive spelling is
    decoded.
    """
    if not isinstance(text, str):
        raise RomanError(f"expected a string, got {type(text).__name__}")
    cleaned = text.strip().upper()
    if not cleaned:
        raise RomanError("empty numeral")
    value = _decode_loose(cleaned)
    if strict and (value < MIN_VALUE or value > MAX_VALUE or to_roman(value) != cleaned):
        raise RomanError(f"{text!r} is not a canonical Roman numeral")
    return value


def is_valid(text):
    """True if ``text`` is a canonical Roman numeral."""
    try:
        from_roman(text)
    except RomanError:
        return False
    return True
