"""A per-row cost of plan columns computed once per distinct combination of the values it depends on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from plait.plan.columns import PlanColumns
from plait.plan.keys import distinct_rows


def per_distinct(cols: PlanColumns, one: Callable[..., tuple[float, float]], *columns: Any) -> tuple[Any, Any]:
    """The two figures ``one(*values)`` gives for each row of ``cols``, ``values`` the row's entries of ``columns``
    (arrays or numbers), each distinct combination computed once: a batch of thousands of plans holds few. For one
    plan, ``one``'s own two numbers."""
    if cols.xp.scalar:
        return one(*columns)
    values = np.broadcast_arrays(*(np.asarray(c, dtype=float) for c in columns))
    first, inverse = distinct_rows(*values)
    each = np.array([one(*row) for row in np.stack([v[first] for v in values], axis=1)])
    return each[inverse, 0], each[inverse, 1]
