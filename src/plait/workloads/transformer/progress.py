"""A progress bar that appears only when a search runs longer than a second, with the candidates given a verdict
per second."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

DELAY_S = 1.0


class LazyProgress:
    """Callable ``(done, total)`` for :func:`plait.search.runner.run_search`; silent for fast searches."""

    def __init__(self, console: Console, label: str) -> None:
        self._console, self._label = console, label
        self._start = time.perf_counter()
        self._bar: Progress | None = None
        self._task = 0

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if time.perf_counter() - self._start < DELAY_S or not self._console.is_terminal:
                return
            self._bar = Progress(TextColumn(self._label), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=self._console,
                                 transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=total, rate="")
        elapsed = time.perf_counter() - self._start
        self._bar.update(self._task, completed=done, total=total, rate=f"{done / elapsed:,.0f} candidates/s")

    def __enter__(self) -> LazyProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
