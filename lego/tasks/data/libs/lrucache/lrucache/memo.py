"""``@memoize``: cache a function's results by its arguments in an LRU cache."""

import functools

from lrucache.cache import LRUCache

_MISSING = object()


def _make_key(args, kwargs, typed):
    key = args
    if kwargs:
        key += (_MISSING,) + tuple(sorted(kwargs.items()))
    if typed:
        key += tuple(type(a) for a in args)
    return key


def memoize(maxsize=128, typed=False):
    """Decorator: remember up to ``maxsize`` results. ``typed`` keeps ``1`` and ``1.0`` apart.

    The wrapper has ``cache`` (the :class:`LRUCache`) and ``cache_clear()``.
    """

    def decorate(func):
        cache = LRUCache(maxsize)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            key = _make_key(args, kwargs, typed)
            value = cache.get(key, _MISSING)
            if value is _MISSING:
                value = func(*args, **kwargs)
                cache.put(key, value)
            return value

        wrapper.cache = cache
        wrapper.cache_clear = cache.clear
        return wrapper

    return decorate
