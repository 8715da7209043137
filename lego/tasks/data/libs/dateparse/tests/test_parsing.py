import pytest

from dateparse import Date, DateError, parse, parse_duration


def test_parse_iso():
    assert parse("2024-03-05") == Date(2024, 3, 5)


def test_parse_iso_whitespace():
    assert parse("  2024-03-05\n") == Date(2024, 3, 5)


def test_parse_iso_short_year_rejected():
    with pytest.raises(DateError):
        parse("24-03-05")


def test_parse_us():
    assert parse("03/05/2024") == Date(2024, 3, 5)


def test_parse_us_two_digit_year():
    assert parse("12/31/99") == Date(1999, 12, 31)


def test_parse_two_digit_year_2000s():
    assert parse("01/02/05") == Date(2005, 1, 2)


def test_parse_two_digit_year_pivot_68():
    assert parse("01/02/68") == Date(2068, 1, 2)


def test_parse_two_digit_year_pivot_69():
    assert parse("01/02/69") == Date(1969, 1, 2)


def test_parse_european():
    assert parse("05.03.2024") == Date(2024, 3, 5)


def test_parse_day_month_name():
    assert parse("5 March 2024") == Date(2024, 3, 5)


def test_parse_month_name_day():
    assert parse("March 5 2024") == Date(2024, 3, 5)


def test_parse_abbreviated_with_comma():
    assert parse("Mar 5, 2024") == Date(2024, 3, 5)


def test_parse_month_lowercase():
    assert parse("5 dec 2023") == Date(2023, 12, 5)


def test_parse_september_full():
    assert parse("September 30 2023") == Date(2023, 9, 30)


def test_parse_unknown_month():
    with pytest.raises(DateError):
        parse("5 Smarch 2024")


def test_parse_invalid_date():
    with pytest.raises(DateError):
        parse("2023-02-30")


def test_parse_empty():
    with pytest.raises(DateError):
        parse("   ")


def test_parse_garbage():
    with pytest.raises(DateError):
        parse("tomorrowish")


def test_parse_non_numeric_part():
    with pytest.raises(DateError):
        parse("2024-ab-01")


def test_parse_wrong_part_count():
    with pytest.raises(DateError):
        parse("2024-03")


def test_parse_today():
    assert parse("today", today=Date(2024, 3, 5)) == Date(2024, 3, 5)


def test_parse_tomorrow():
    assert parse("Tomorrow", today=Date(2024, 2, 29)) == Date(2024, 3, 1)


def test_parse_yesterday():
    assert parse("yesterday", today=Date(2024, 1, 1)) == Date(2023, 12, 31)


def test_parse_relative_needs_today():
    with pytest.raises(DateError):
        parse("today")


def test_duration_days():
    assert parse_duration("3d") == 3


def test_duration_weeks():
    assert parse_duration("2w") == 14


def test_duration_combined():
    assert parse_duration("1w 2d") == 9


def test_duration_negative():
    assert parse_duration("-1w 2d") == -5


def test_duration_uppercase_unit():
    assert parse_duration("4D") == 4


def test_duration_bad_unit():
    with pytest.raises(DateError):
        parse_duration("3h")


def test_duration_empty():
    with pytest.raises(DateError):
        parse_duration("")


def test_duration_missing_amount():
    with pytest.raises(DateError):
        parse_duration("d")
