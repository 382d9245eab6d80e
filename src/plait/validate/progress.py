"""Each measured row predicted in turn, with the progress of the rows heard by a callback (``plait validate`` shows
it on a terminal: :mod:`plait.progress`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Row = TypeVar("Row")
Result = TypeVar("Result")
Progress = Callable[[int, int], None]
"""Hears (rows predicted, rows)."""


def each(rows: Sequence[Row], predict: Callable[[Row], Result], progress: Progress | None = None) -> list[Result]:
    """``predict`` of every row, in order, ``progress`` told after each."""
    results = []
    for done, row in enumerate(rows, 1):
        results.append(predict(row))
        if progress is not None:
            progress(done, len(rows))
    return results
