"""Results memoized per model object: the one cache the capacity rules share.

A `ModelSpec` is frozen, so the same object always gives the same figures; the grid asks for one model
at many GPUs, dtypes, engines and parallel sizes. Entries are keyed by the object's identity (hashing a
spec walks every layer) and keep the object alive, so that an id stays its own; the cache is cleared
when full (a fresh start rather than an LRU: the grid visits models in order).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

_T = TypeVar("_T")
_MAX_ENTRIES = 65536  # the rules together keep ~25k entries on a 10M-row grid
_ENTRIES: dict[tuple[Hashable, ...], tuple[object, object]] = {}


def per_object(owner: object, key: tuple[Hashable, ...], compute: Callable[[], _T]) -> _T:
    """`compute()` once per (owner object, key); `key` names the rule first, then its arguments."""
    slot = (id(owner), *key)
    found = _ENTRIES.get(slot)
    if found is not None and found[0] is owner:
        return found[1]  # type: ignore[return-value]
    value = compute()
    if len(_ENTRIES) >= _MAX_ENTRIES:
        _ENTRIES.clear()
    _ENTRIES[slot] = (owner, value)
    return value
