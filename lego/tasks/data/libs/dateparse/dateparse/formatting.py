"""Formatting dates with strftime-like directives, ISO week numbers, and human-readable gaps."""

from dateparse.calendar import Date, day_of_year

MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December"]
DAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def iso_week(date):
    """(ISO year, ISO week number); week 1 is the week with the year's first Thursday."""
    thursday = date + (3 - date.weekday())
    first = Date(thursday.year, 1, 1)
    return thursday.year, (thursday - first) // 7 + 1


def format_date(date, pattern):
    """Expand ``%Y %y %m %d %e %B %b %A %a %j %V %%`` in ``pattern``."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char != "%" or i + 1 == len(pattern):
            out.append(char)
            i += 1
            continue
        code = pattern[i + 1]
        i += 2
        if code == "Y":
            out.append(f"{date.year:04d}")
        elif code == "y":
            out.append(f"{date.year % 100:02d}")
        elif code == "m":
            out.append(f"{date.month:02d}")
        elif code == "d":
            out.append(f"{date.day:02d}")
        elif code == "e":
            out.append(str(date.day))
        elif code == "B":
            out.append(MONTH_NAMES[date.month - 1])
        elif code == "b":
            out.append(MONTH_NAMES[date.month - 1][:3])
        elif code == "A":
            out.append(DAY_NAMES[date.weekday()])
        elif code == "a":
            out.append(DAY_NAMES[date.weekday()][:3])
        elif code == "j":
            out.append(f"{day_of_year(date.year, date.month, date.day):03d}")
        elif code == "V":
            out.append(f"{iso_week(date)[1]:02d}")
        elif code == "%":
            out.append("%")
        else:
            raise ValueError(f"unknown directive %{code}")
    return "".join(out)


def humanize_delta(days):
    """``today``, ``tomorrow``, ``yesterday``, ``in 3 days``, ``2 weeks ago``..."""
    if days == 0:
        return "today"
    if days == 1:
        return "tomorrow"
    if days == -1:
        return "yesterday"
    size = abs(days)
    if size >= 14 and size % 7 == 0:
        amount, unit = size // 7, "weeks"
    else:
        amount, unit = size, "days"
    if days > 0:
        return f"in {amount} {unit}"
    return f"{amount} {unit} ago"
