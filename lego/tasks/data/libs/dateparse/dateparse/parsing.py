"""Parse dates written as ISO (``2024-03-05``), US (``03/05/2024``), European (``05.03.2024``) or
with month names (``5 March 2024``, ``Mar 5, 2024``), and durations like ``1w 2d``."""

from dateparse.calendar import Date, DateError

MONTHS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
    "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
}

DURATION_UNITS = {"d": 1, "w": 7}


def _month_number(word):
    key = word.strip(".,").lower()[:3]
    if key not in MONTHS:
        raise DateError(f"unknown month name {word!r}")
    return MONTHS[key]


def _int(text, what):
    if not text.isdigit():
        raise DateError(f"{what} {text!r} is not a number")
    return int(text)


def _expand_year(year_text):
    """Two-digit years: 00-68 are 2000-2068, 69-99 are 1969-1999."""
    year = _int(year_text, "year")
    if len(year_text) == 2:
        return year + 2000 if year <= 68 else year + 1900
    return year


def _parse_numeric(text):
    if "-" in text:
        parts = text.split("-")
        if len(parts) != 3 or len(parts[0]) != 4:
            raise DateError(f"{text!r} is not an ISO date (YYYY-MM-DD)")
        return Date(_int(parts[0], "year"), _int(parts[1], "month"), _int(parts[2], "day"))
    if "/" in text:
        parts = text.split("/")
        if len(parts) != 3:
            raise DateError(f"{text!r} is not a US date (MM/DD/YYYY)")
        return Date(_expand_year(parts[2]), _int(parts[0], "month"), _int(parts[1], "day"))
    if "." in text:
        parts = text.split(".")
        if len(parts) != 3:
            raise DateError(f"{text!r} is not a European date (DD.MM.YYYY)")
        return Date(_expand_year(parts[2]), _int(parts[1], "month"), _int(parts[0], "day"))
    raise DateError(f"cannot parse {text!r} as a date")


def _parse_words(words):
    """``5 March 2024``, ``March 5 2024`` or ``Mar 5, 2024``."""
    if len(words) != 3:
        raise DateError(f"expected day, month name and year, got {' '.join(words)!r}")
    first = words[0].strip(",")
    if first.isdigit():
        day, month = _int(first, "day"), _month_number(words[1])
    else:
        month, day = _month_number(words[0]), _int(words[1].strip(","), "day")
    return Date(_expand_year(words[2].strip(",")), month, day)


def parse(text, today=None):
    """Parse a date. ``today``, ``tomorrow`` and ``yesterday`` are relative to ``today`` (a Date)."""
    cleaned = text.strip()
    if not cleaned:
        raise DateError("empty date string")
    lowered = cleaned.lower()
    relative = {"today": 0, "tomorrow": 1, "yesterday": -1}
    if lowered in relative:
        if today is None:
            raise DateError(f"{cleaned!r} needs a reference date (today=...)")
        return today + relative[lowered]
    words = cleaned.split()
    if len(words) == 1:
        return _parse_numeric(cleaned)
    return _parse_words(words)


def parse_duration(text):
    """Days in a duration such as ``3d``, ``2w`` or ``1w 2d`` (units may repeat and add up)."""
    total = 0
    parts = text.split()
    if not parts:
        raise DateError("empty duration")
    for part in parts:
        unit = part[-1:].lower()
        if unit not in DURATION_UNITS:
            raise DateError(f"unknown duration unit in {part!r}; use d or w")
        amount = part[:-1]
        sign = 1
        if amount.startswith("-"):
            sign = -1
            amount = amount[1:]
        total += sign * _int(amount, "amount") * DURATION_UNITS[unit]
    return total
