import pytest

from dateparse import Date, DateError, day_of_year, days_in_month, is_leap_year, weekday


def test_leap_divisible_by_4():
    assert is_leap_year(2024)


def test_not_leap_century():
    assert not is_leap_year(1900)


def test_leap_400():
    assert is_leap_year(2000)


def test_not_leap_odd():
    assert not is_leap_year(2023)


def test_days_in_february_leap():
    assert days_in_month(2024, 2) == 29


def test_days_in_february():
    assert days_in_month(2023, 2) == 28


def test_days_in_december():
    assert days_in_month(2023, 12) == 31


def test_days_in_april():
    assert days_in_month(2023, 4) == 30


def test_days_in_bad_month():
    with pytest.raises(DateError):
        days_in_month(2023, 13)


def test_day_of_year_jan1():
    assert day_of_year(2023, 1, 1) == 1


def test_day_of_year_march1_leap():
    assert day_of_year(2024, 3, 1) == 61


def test_day_of_year_dec31():
    assert day_of_year(2023, 12, 31) == 365


def test_weekday_known():
    assert weekday(2024, 3, 15) == 4


def test_weekday_monday():
    assert weekday(2001, 1, 1) == 0


def test_weekday_sunday():
    assert weekday(2023, 12, 31) == 6


def test_date_invalid_day():
    with pytest.raises(DateError):
        Date(2023, 2, 29)


def test_date_valid_leap_day():
    assert Date(2024, 2, 29).isoformat() == "2024-02-29"


def test_date_invalid_year():
    with pytest.raises(DateError):
        Date(0, 1, 1)


def test_date_zero_day():
    with pytest.raises(DateError):
        Date(2023, 5, 0)


def test_isoformat_padding():
    assert Date(987, 3, 5).isoformat() == "0987-03-05"


def test_add_days_across_year():
    assert Date(2023, 12, 30) + 3 == Date(2024, 1, 2)


def test_add_days_leap():
    assert Date(2024, 2, 28) + 1 == Date(2024, 2, 29)


def test_subtract_days():
    assert Date(2024, 3, 1) - 1 == Date(2024, 2, 29)


def test_difference():
    assert Date(2024, 1, 1) - Date(2023, 1, 1) == 365


def test_difference_leap_year():
    assert Date(2025, 1, 1) - Date(2024, 1, 1) == 366


def test_ordinal_roundtrip():
    for ordinal in (1, 59, 60, 365, 366, 730120, 738000):
        assert Date.from_ordinal(ordinal).ordinal() == ordinal


def test_ordinal_first_day():
    assert Date(1, 1, 1).ordinal() == 1


def test_from_ordinal_invalid():
    with pytest.raises(DateError):
        Date.from_ordinal(0)


def test_ordering():
    assert Date(2023, 5, 1) < Date(2023, 5, 2)


def test_ordering_le_equal():
    assert Date(2023, 5, 1) <= Date(2023, 5, 1)


def test_sort():
    dates = [Date(2024, 1, 2), Date(2023, 12, 31), Date(2024, 1, 1)]
    assert sorted(dates) == [Date(2023, 12, 31), Date(2024, 1, 1), Date(2024, 1, 2)]


def test_add_months_simple():
    assert Date(2024, 1, 15).add_months(1) == Date(2024, 2, 15)


def test_add_months_clamps():
    assert Date(2024, 1, 31).add_months(1) == Date(2024, 2, 29)


def test_add_months_across_year():
    assert Date(2023, 11, 30).add_months(3) == Date(2024, 2, 29)


def test_add_months_negative():
    assert Date(2024, 3, 31).add_months(-1) == Date(2024, 2, 29)


def test_add_months_december():
    assert Date(2024, 1, 10).add_months(11) == Date(2024, 12, 10)


def test_end_of_month():
    assert Date(2023, 2, 10).end_of_month() == Date(2023, 2, 28)


def test_repr():
    assert repr(Date(2024, 3, 5)) == "Date(2024, 3, 5)"
