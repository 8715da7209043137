"""LRU cache on a hash map plus a doubly linked list (most recent at the head)."""


class CacheStats:
    """Counters of one cache."""

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @property
    def lookups(self):
        return self.hits + self.misses

    @property
    def hit_rate(self):
        """Fraction of lookups that hit; 0.0 before any lookup."""
        if self.lookups == 0:
            return 0.0
        return self.hits / self.lookups


class _Node:
    __slots__ = ("key", "next", "prev", "value", "weight")

    def __init__(self, key, value, weight):
        self.key = key
        self.value = value
        self.weight = weight
        self.prev = None
        self.next = None


class LRUCache:
    """Holds at most ``capacity`` total weight; each entry weighs 1 unless ``weigh`` says otherwise.

    ``on_evict(key, value)`` is called for every entry pushed out to make room.
    """

    def __init__(self, capacity=128, weigh=None, on_evict=None):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._weigh = weigh or (lambda value: 1)
        self._on_evict = on_evict
        self._map = {}
        self._head = None
        self._tail = None
        self.weight = 0
        self.stats = CacheStats()

    def __len__(self):
        return len(self._map)

    def __contains__(self, key):
        return key in self._map

    def _unlink(self, node):
        if node.prev is not None:
            node.prev.next = node.next
        else:
            self._head = node.next
        if node.next is not None:
            node.next.prev = node.prev
        else:
            self._tail = node.prev
        node.prev = node.next = None

    def _push_front(self, node):
        node.next = self._head
        node.prev = None
        if self._head is not None:
            self._head.prev = node
        self._head = node
        if self._tail is None:
            self._tail = node

    def get(self, key, default=None):
        """The value for ``key`` (marking it most recently used), or ``default``."""
        node = self._map.get(key)
        if node is None:
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        self._unlink(node)
        self._push_front(node)
        return node.value

    def peek(self, key, default=None):
        """The value for ``key`` without touching recency or statistics."""
        node = self._map.get(key)
        return default if node is None else node.value

    def put(self, key, value):
        """Insert or replace; evict least recently used entries until the weight fits."""
        weight = self._weigh(value)
        if weight > self.capacity:
            raise ValueError(f"value weighs {weight}, more than the capacity {self.capacity}")
        old = self._map.pop(key, None)
        if old is not None:
            self._unlink(old)
            self.weight -= old.weight
        node = _Node(key, value, weight)
        self._map[key] = node
        self._push_front(node)
        self.weight += weight
        while self.weight > self.capacity:
            self._evict_one()

    def _evict_one(self):
        node = self._tail
        self._unlink(node)
        del self._map[node.key]
        self.weight -= node.weight
        self.stats.evictions += 1
        if self._on_evict is not None:
            self._on_evict(node.key, node.value)

    def pop(self, key, default=None):
        node = self._map.pop(key, None)
        if node is None:
            return default
        self._unlink(node)
        self.weight -= node.weight
        return node.value

    def keys(self):
        """Keys from most to least recently used."""
        out = []
        node = self._head
        while node is not None:
            out.append(node.key)
            node = node.next
        return out

    def items(self):
        return [(key, self._map[key].value) for key in self.keys()]

    def oldest(self):
        """The least recently used key, or None when empty."""
        return None if self._tail is None else self._tail.key

    def resize(self, capacity):
        """Change the capacity, evicting as needed."""
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        while self.weight > self.capacity:
            self._evict_one()

    def clear(self):
        self._map.clear()
        self._head = self._tail = None
        self.weight = 0
