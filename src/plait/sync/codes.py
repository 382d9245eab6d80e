"""Integer codes of methods, for plan columns (:mod:`plait.plan.columns` stores a plan's ``dp_sync`` as one).

The table is per process and grows as methods are first seen; ``allreduce`` is 0. Codes are read back in the
process that made them (the planner's pieces return plans, not codes). Questions about the rows of columns are
asked of the typed methods, once per distinct code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plait.sync.base import SyncMethod
from plait.sync.registry import ALLREDUCE

TABLE: list[SyncMethod] = [ALLREDUCE]
"""Methods seen in this process, by code."""
_CODES: dict[SyncMethod, int] = {ALLREDUCE: 0}


def code_of(method: SyncMethod) -> int:
    """The code of ``method``, added to :data:`TABLE` on first sight."""
    found = _CODES.get(method)
    if found is None:
        found = _CODES[method] = len(TABLE)
        TABLE.append(method)
    return found


def method_of(code: int) -> SyncMethod:
    """The method of ``code``."""
    return TABLE[code]


def rows_where(cols: Any, question: Callable[[SyncMethod], bool]) -> Any:
    """Rows of plan columns ``cols`` (:class:`plait.plan.columns.PlanColumns`) whose method answers ``question``
    with yes."""
    if cols.xp.scalar:  # one plan: one lookup
        return question(TABLE[cols["dp_sync"]])
    codes = [i for i, method in enumerate(TABLE) if question(method)]
    return cols.xp.any_of([cols["dp_sync"] == i for i in codes]) if codes else cols.full(False)


def values_where(cols: Any, kind: type[SyncMethod], value: Callable[[Any], Any], fill: Any) -> Any:
    """Per row of ``cols``, ``value(method)`` where the row's method is a ``kind`` (``fill`` on other rows)."""
    if cols.xp.scalar:
        method = TABLE[cols["dp_sync"]]
        return value(method) if isinstance(method, kind) else fill
    out = cols.full(fill)
    for code, method in enumerate(TABLE):
        if isinstance(method, kind):
            out = cols.xp.where(cols["dp_sync"] == code, value(method), out)
    return out
