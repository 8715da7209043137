"""A least-recently-used cache with statistics, and a memoising decorator built on it."""

from lrucache.cache import CacheStats, LRUCache
from lrucache.memo import memoize

__all__ = ["CacheStats", "LRUCache", "memoize"]
