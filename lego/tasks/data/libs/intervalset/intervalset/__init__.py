"""Half-open intervals ``[start, end)`` and normalised sets of them."""

from intervalset.interval import Interval, IntervalError
from intervalset.iset import IntervalSet

__all__ = ["Interval", "IntervalError", "IntervalSet"]
