"""Calendar dates without ``datetime``: parsing several formats, formatting, and day arithmetic."""

from dateparse.calendar import (
    Date,
    DateError,
    day_of_year,
    days_in_month,
    is_leap_year,
    weekday,
)
from dateparse.formatting import format_date, humanize_delta, iso_week
from dateparse.parsing import parse, parse_duration

__all__ = [
    "Date",
    "DateError",
    "day_of_year",
    "days_in_month",
    "format_date",
    "humanize_delta",
    "is_leap_year",
    "iso_week",
    "parse",
    "parse_duration",
    "weekday",
]
