"""Values kept by what they are computed from: a bounded memo for pure functions of frozen objects and values.

One estimate asks for the same derived quantity many times, and a planner's top plans, a validation's rows or a
repeated estimate share most of their inputs. A :class:`Kept` holds the last ``size`` values, each under a key of
the identity of the frozen objects it was computed from and of plain values. Each entry holds those objects, so an
id is not reused while its entry lives, and the same object is the same value (frozen). Every table is listed in
:data:`TABLES`, so :func:`empty_all` starts afresh (tests that count work, the benchmark of a plan seen first).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

V = TypeVar("V")

MISSING = object()
"""What :meth:`Kept.find` returns for a key it does not hold."""


class Kept(Generic[V]):
    """The last ``size`` values kept (the oldest out first), by key; each with the objects its key names by id."""

    def __init__(self, size: int, *, per_estimate: bool = True) -> None:
        """``per_estimate``: the table keeps what estimates compute, and :func:`empty_all` empties it; ``False``: it
        keeps what a catalog object derives from itself alone (an engine's listing), which stays."""
        assert size > 0, "a table keeps at least one value"
        self._size = size
        self._entries: dict[tuple[object, ...], tuple[tuple[object, ...], V]] = {}
        if per_estimate:
            TABLES.add(self)

    def find(self, key: tuple[object, ...]) -> V | object:
        """The value kept under ``key``, or :data:`MISSING`."""
        entry = self._entries.get(key)
        return MISSING if entry is None else entry[1]

    def keep(self, key: tuple[object, ...], held: tuple[object, ...], value: V) -> V:
        """Keep ``value`` under ``key``, holding ``held`` (the objects ``key`` names by id) while it lives; return
        ``value``."""
        if len(self._entries) >= self._size:
            del self._entries[next(iter(self._entries))]  # the oldest
        self._entries[key] = (held, value)
        return value

    def get(self, key: tuple[object, ...], held: tuple[object, ...], compute: Callable[[], V]) -> V:
        """The value kept under ``key``, else ``compute()`` kept under it (holding ``held``)."""
        entries = self._entries
        entry = entries.get(key)
        if entry is not None:
            return entry[1]
        value = compute()  # kept as keep() keeps it, written out: a cold estimate misses some twenty tables
        if len(entries) >= self._size:
            del entries[next(iter(entries))]  # the oldest
        entries[key] = (held, value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


TABLES: weakref.WeakSet[Kept[Any]] = weakref.WeakSet()
"""Every per-estimate :class:`Kept` alive (the module-level tables, made once at import, and any a test makes while it lives)."""


def empty_all() -> None:
    """Empty every table: the next estimate computes everything afresh."""
    for table in TABLES:
        table.clear()
