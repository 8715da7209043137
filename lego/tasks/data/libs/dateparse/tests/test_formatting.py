import pytest

from dateparse import Date, format_date, humanize_delta, iso_week


def test_format_iso():
    assert format_date(Date(2024, 3, 5), "%Y-%m-%d") == "2024-03-05"


def test_format_short_year():
    assert format_date(Date(2005, 3, 5), "%y") == "05"


def test_format_unpadded_day():
    assert format_date(Date(2024, 3, 5), "%e") == "5"


def test_format_month_names():
    assert format_date(Date(2024, 9, 1), "%B / %b") == "September / Sep"


def test_format_january():
    assert format_date(Date(2024, 1, 1), "%B") == "January"


def test_format_day_names():
    assert format_date(Date(2024, 3, 15), "%A %a") == "Friday Fri"


def test_format_day_of_year():
    assert format_date(Date(2024, 2, 1), "%j") == "032"


def test_format_literal_percent():
    assert format_date(Date(2024, 2, 1), "100%%") == "100%"


def test_format_trailing_percent():
    assert format_date(Date(2024, 2, 1), "%d%") == "01%"


def test_format_unknown_directive():
    with pytest.raises(ValueError):
        format_date(Date(2024, 2, 1), "%Q")


def test_format_iso_week():
    assert format_date(Date(2024, 3, 15), "%V") == "11"


def test_iso_week_mid_year():
    assert iso_week(Date(2023, 6, 15)) == (2023, 24)


def test_iso_week_belongs_to_previous_year():
    assert iso_week(Date(2021, 1, 1)) == (2020, 53)


def test_iso_week_belongs_to_next_year():
    assert iso_week(Date(2024, 12, 30)) == (2025, 1)


def test_iso_week_first():
    assert iso_week(Date(2024, 1, 1)) == (2024, 1)


def test_humanize_today():
    assert humanize_delta(0) == "today"


def test_humanize_tomorrow():
    assert humanize_delta(1) == "tomorrow"


def test_humanize_yesterday():
    assert humanize_delta(-1) == "yesterday"


def test_humanize_future_days():
    assert humanize_delta(3) == "in 3 days"


def test_humanize_past_days():
    assert humanize_delta(-10) == "10 days ago"


def test_humanize_weeks():
    assert humanize_delta(21) == "in 3 weeks"


def test_humanize_past_weeks():
    assert humanize_delta(-14) == "2 weeks ago"


def test_humanize_one_week_in_days():
    assert humanize_delta(7) == "in 7 days"


def test_humanize_not_whole_weeks():
    assert humanize_delta(15) == "in 15 days"
