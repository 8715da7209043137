"""A single half-open interval ``[start, end)``."""


class IntervalError(ValueError):
    """Raised for an interval whose end comes before its start."""


class Interval:
    """The numbers ``x`` with ``start <= x < end``. An interval with ``start == end`` is empty."""

    __slots__ = ("end", "start")

    def __init__(self, start, end):
        if end < start:
            raise IntervalError(f"end {end} is before start {start}")
        self.start = start
        self.end = end

    def __repr__(self):
        return f"Interval({self.start!r}, {self.end!r})"

    def __eq__(self, other):
        if not isinstance(other, Interval):
            return NotImplemented
        return self.start == other.start and self.end == other.end

    def __hash__(self):
        return hash((self.start, self.end))

    def __lt__(self, other):
        return (self.start, self.end) < (other.start, other.end)

    @property
    def length(self):
        return self.end - self.start

    def is_empty(self):
        return self.start == self.end

    def __contains__(self, value):
        return self.start <= value < self.end

    def overlaps(self, other):
        """True if the two intervals share at least one point."""
        return self.start < other.end and other.start < self.end

    def touches(self, other):
        """True if the intervals overlap or are adjacent (``[1, 2)`` and ``[2, 3)``)."""
        return self.start <= other.end and other.start <= self.end

    def intersection(self, other):
        """The common part, or None when they do not overlap."""
        start = max(self.start, other.start)
        end = min(self.end, other.end)
        if start >= end:
            return None
        return Interval(start, end)

    def hull(self, other):
        """The smallest interval containing both."""
        return Interval(min(self.start, other.start), max(self.end, other.end))

    def shift(self, offset):
        return Interval(self.start + offset, self.end + offset)

    def expand(self, amount):
        """Grow by ``amount`` on both sides (shrink when negative, never below empty)."""
        start = self.start - amount
        end = self.end + amount
        if end < start:
            middle = (self.start + self.end) / 2
            return Interval(middle, middle)
        return Interval(start, end)

    def split(self, point):
        """Two intervals cut at ``point``; ``point`` must lie inside."""
        if not self.start < point < self.end:
            raise IntervalError(f"{point} is not strictly inside {self!r}")
        return Interval(self.start, point), Interval(point, self.end)
