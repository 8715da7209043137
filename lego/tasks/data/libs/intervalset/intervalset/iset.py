"""A set of numbers stored as sorted, disjoint, non-adjacent intervals."""

from intervalset.interval import Interval


def _normalise(intervals):
    """Sort, drop empties and merge overlapping or adjacent intervals."""
    items = sorted(i for i in intervals if not i.is_empty())
    merged = []
    for item in items:
        if merged and merged[-1].touches(item):
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, item.end))
        else:
            merged.append(item)
    return merged


class IntervalSet:
    """An immutable union of half-open intervals."""

    def __init__(self, intervals=()):
        converted = [i if isinstance(i, Interval) else Interval(*i) for i in intervals]
        self._items = _normalise(converted)

    @property
    def intervals(self):
        return list(self._items)

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __bool__(self):
        return bool(self._items)

    def __eq__(self, other):
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._items == other._items

    def __repr__(self):
        inner = ", ".join(f"[{i.start}, {i.end})" for i in self._items)
        return f"IntervalSet({inner})"

    def __contains__(self, value):
        low, high = 0, len(self._items)
        while low < high:
            mid = (low + high) // 2
            item = self._items[mid]
            if value < item.start:
                high = mid
            elif value >= item.end:
                low = mid + 1
            else:
                return True
        return False

    @property
    def total_length(self):
        return sum(i.length for i in self._items)

    def bounds(self):
        """The hull of the whole set, or None when empty."""
        if not self._items:
            return None
        return Interval(self._items[0].start, self._items[-1].end)

    def union(self, other):
        return IntervalSet(self._items + other._items)

    def intersection(self, other):
        result = []
        i = j = 0
        a, b = self._items, other._items
        while i < len(a) and j < len(b):
            common = a[i].intersection(b[j])
            if common is not None:
                result.append(common)
            if a[i].end < b[j].end:
                i += 1
            else:
                j += 1
        return IntervalSet(result)

    def difference(self, other):
        result = []
        for item in self._items:
            pieces = [item]
            for cut in other._items:
                next_pieces = []
                for piece in pieces:
                    if not piece.overlaps(cut):
                        next_pieces.append(piece)
                        continue
                    if piece.start < cut.start:
                        next_pieces.append(Interval(piece.start, cut.start))
                    if cut.end < piece.end:
                        next_pieces.append(Interval(cut.end, piece.end))
                pieces = next_pieces
            result.extend(pieces)
        return IntervalSet(result)

    def complement(self, start, end):
        """The gaps of this set within ``[start, end)``."""
        return IntervalSet([(start, end)]).difference(self)

    def gaps(self):
        """The holes between consecutive intervals."""
        return [Interval(a.end, b.start) for a, b in zip(self._items, self._items[1:])]

    def add(self, start, end):
        return self.union(IntervalSet([(start, end)]))

    def remove(self, start, end):
        return self.difference(IntervalSet([(start, end)]))

    def largest(self):
        """The longest interval (the first one on ties), or None when empty."""
        best = None
        for item in self._items:
            if best is None or item.length > best.length:
                best = item
        return best
