"""Proleptic Gregorian calendar arithmetic on plain integers."""

MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


class DateError(ValueError):
    """A date does not exist or a string cannot be parsed as one."""


def is_leap_year(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise DateError(f"month {month} is not in 1..12")
    if month == 2 and is_leap_year(year):
        return 29
    return MONTH_DAYS[month - 1]


def day_of_year(year, month, day):
    """1 for January 1st."""
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def _days_before_year(year):
    y = year - 1
    return y * 365 + y // 4 - y // 100 + y // 400


def to_ordinal(year, month, day):
    """Days since 0001-01-01, which is ordinal 1."""
    return _days_before_year(year) + day_of_year(year, month, day)


def from_ordinal(ordinal):
    """Inverse of :func:`to_ordinal`."""
    if ordinal < 1:
        raise DateError(f"ordinal {ordinal} is before 0001-01-01")
    year = max(1, ordinal // 366)
    while _days_before_year(year + 1) < ordinal:
        year += 1
    remaining = ordinal - _days_before_year(year)
    month = 1
    while remaining > days_in_month(year, month):
        remaining -= days_in_month(year, month)
        month += 1
    return year, month, remaining


def weekday(year, month, day):
    """0 for Monday through 6 for Sunday (0001-01-01 was a Monday)."""
    return (to_ordinal(year, month, day) - 1) % 7


class Date:
    """A valid calendar date; supports comparison, ``+``/``-`` with day counts and differences."""

    __slots__ = ("day", "month", "year")

    def __init__(self, year, month, day):
        if not 1 <= year <= 9999:
            raise DateError(f"year {year} is not in 1..9999")
        if not 1 <= day <= days_in_month(year, month):
            raise DateError(f"{year:04d}-{month:02d} has no day {day}")
        self.year = year
        self.month = month
        self.day = day

    def __repr__(self):
        return f"Date({self.year}, {self.month}, {self.day})"

    def isoformat(self):
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"

    def _key(self):
        return (self.year, self.month, self.day)

    def __eq__(self, other):
        return isinstance(other, Date) and self._key() == other._key()

    def __lt__(self, other):
        return self._key() < other._key()

    def __le__(self, other):
        return self._key() <= other._key()

    def __hash__(self):
        return hash(self._key())

    def ordinal(self):
        return to_ordinal(self.year, self.month, self.day)

    @classmethod
    def from_ordinal(cls, ordinal):
        return cls(*from_ordinal(ordinal))

    def __add__(self, days):
        return Date.from_ordinal(self.ordinal() + days)

    def __sub__(self, other):
        if isinstance(other, Date):
            return self.ordinal() - other.ordinal()
        return Date.from_ordinal(self.ordinal() - other)

    def weekday(self):
        return weekday(self.year, self.month, self.day)

    def add_months(self, months):
        """Move by whole months, clamping the day to the target month's length (Jan 31 + 1 = Feb 28/29)."""
        index = self.year * 12 + (self.month - 1) + months
        year, month = divmod(index, 12)
        month += 1
        return Date(year, month, min(self.day, days_in_month(year, month)))

    def end_of_month(self):
        return Date(self.year, self.month, days_in_month(self.year, self.month))
