"""Plan columns that build each field as it is first read and note which fields a check read
(:mod:`plait.search.factored` observes so which option lists each pruning rule reads)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from plait.plan.array_ops import ARRAY
from plait.plan.columns import FIELDS, PlanColumns

_FIELDS = frozenset(FIELDS)


class Noting(dict):  # type: ignore[type-arg]
    """Plan columns built as they are first read (``build``), noting the fields read (``reads``; ``None``: not
    noting). Reading them all at once (``items``, ``values``, ``keys``, iteration, ``take``) builds and notes them
    all."""

    reads: set[str] | None = None

    def __init__(self, build: Callable[[str], np.ndarray]) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, key: str) -> np.ndarray:
        if key not in _FIELDS:
            raise KeyError(key)
        value = self[key] = self.build(key)
        return value

    def __getitem__(self, key: str) -> Any:
        if self.reads is not None:
            self.reads.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in _FIELDS else default

    def __contains__(self, key: object) -> bool:
        return key in _FIELDS

    def _every(self) -> None:
        if self.reads is not None:
            self.reads.update(FIELDS)
        for name in FIELDS:
            if not super().__contains__(name):
                self.__missing__(name)

    def keys(self):  # type: ignore[no-untyped-def]
        self._every()
        return super().keys()

    def values(self):  # type: ignore[no-untyped-def]
        self._every()
        return super().values()

    def items(self):  # type: ignore[no-untyped-def]
        self._every()
        return super().items()

    def __iter__(self) -> Iterator[str]:
        self._every()
        return super().__iter__()

    def __len__(self) -> int:
        return len(FIELDS)

    def copy(self) -> dict[str, Any]:
        self._every()
        return dict(super().items())


class LazyColumns(PlanColumns):
    """Plan columns over a :class:`Noting` table, whose fields exist once read."""

    def __post_init__(self) -> None:  # every field has the table's length by construction
        object.__setattr__(self, "xp", ARRAY)
