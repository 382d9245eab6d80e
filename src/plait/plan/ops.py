"""The column operations the cost model, the plan rules and the capability table are written against.

One implementation serves a million plans and one (STYLE.md rule 9): a batch runs it on numpy arrays
(:data:`plait.plan.array_ops.ARRAY`, a module of its own: a single plan's process never imports numpy), a single
plan (``plait estimate``, every validation row, the simulator's stages) on plain Python ints, floats and bools
(:data:`SCALAR`), where a numpy call on a one-element array would cost about a
microsecond for a nanosecond of arithmetic. Both evaluate the same IEEE-754 double operations in the same
order, so they give the same bits (``tests/test_batch_equality.py``). Operators (``+ * / // % == & |``) work
on both as they are; what differs is here: ``where``/``maximum``/``minimum``/``select``, negation (``~`` on a
Python bool is an integer), ``any_of``, ``argmax``/``choose`` over stage candidates, ``total`` (Python 3.12's
``sum`` of floats compensates its rounding, numpy's elementwise ``+`` does not), ``column`` (a fresh value
of the batch's shape) and ``exp`` (the C library's for one plan, numpy's for columns: the same bits where numpy
has no SIMD loop of its own for it, as on AVX2, but not promised on AVX-512; only a search's p90 ranking exponentiates
columns).
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Iterable, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from plait.plan.array_ops import ArrayOps


def total_of(values: Iterable[Any]) -> Any:
    """``values`` added left to right (scalars or columns alike)."""
    return reduce(operator.add, values)


def _select(conds: Sequence[Any], choices: Sequence[Any], default: Any) -> Any:
    return next((choice for cond, choice in zip(conds, choices, strict=True) if cond), default)


class ScalarOps:
    """Plain Python over the one plan of a scalar :class:`~plait.plan.columns.PlanColumns`."""

    scalar = True
    ceil = staticmethod(math.ceil)
    exp = staticmethod(math.exp)
    select = staticmethod(_select)
    total = staticmethod(total_of)

    # where, maximum and minimum are methods (a call the interpreter specialises), not staticmethods of Python's
    # builtins: max(a, b) parses its arguments as keywords and iterates them, some 800 machine instructions a call
    # more than the comparison (valgrind), and an estimate asks for some 70
    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where ``cond``, else ``b``."""
        return a if cond else b

    def maximum(self, a: Any, b: Any) -> Any:
        """The larger of ``a`` and ``b``, ``a`` on ties: the builtin ``max(a, b)`` (which keeps its first argument
        unless the second compares greater)."""
        return b if b > a else a

    def minimum(self, a: Any, b: Any) -> Any:
        """The smaller, ``a`` on ties: ``min(a, b)``."""
        return b if b < a else a

    @staticmethod
    def choose(index: int, values: Sequence[Any]) -> Any:
        """``values[index]``."""
        return values[index]

    @staticmethod
    def not_(value: Any) -> bool:
        """Logical negation."""
        return not value

    @staticmethod
    def any_of(masks: Iterable[Any]) -> bool:
        """Whether any holds."""
        return any(masks)

    @staticmethod
    def argmax(values: Sequence[Any]) -> int:
        """The index of the largest of ``values`` (the first on ties, as numpy's)."""
        best = 0
        for i in range(1, len(values)):
            if values[i] > values[best]:
                best = i
        return best

    @staticmethod
    def column(value: Any, size: int) -> float:
        """``value`` as a float."""
        return float(value)


SCALAR = ScalarOps()
Ops: TypeAlias = "ArrayOps | ScalarOps"


def is_array(value: Any) -> bool:
    """Whether ``value`` is a numpy array (a column of many plans), asked without importing numpy: before numpy is
    imported no value can be one."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)
