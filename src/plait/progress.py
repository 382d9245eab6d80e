"""The one progress display of the commands that can run longer than a second (plan, schedule, validate, calibrate,
converge): a rich bar on standard error when it is a terminal, and nothing on a pipe or with ``--json``.

Counted work (candidates, rows, jobs) calls the display with ``(done, total)``; it appears only once the work has
run :data:`DELAY_S`, so fast commands print nothing. Work in named stages (a measurement, a training run) calls
:meth:`LazyProgress.stage`, which shows the stage at once. The planner's pool reports from the parent process as
each piece completes (:func:`plait.search.runner.run_search`), so workers never write to the terminal.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

DELAY_S = 1.0
"""Counted work shows a bar only after running this long."""


class LazyProgress:
    """Callable ``(done, total)`` and :meth:`stage`; a context manager that removes the bar when the work ends.

    ``quiet`` (the command prints JSON) or a ``console`` that is not a terminal (default: standard error) show
    nothing; ``unit`` names what is counted, in the rate."""

    def __init__(self, label: str, *, quiet: bool = False, console: Console | None = None,
                 unit: str = "candidates") -> None:
        self._console = console if console is not None else Console(stderr=True)
        self._label, self._unit = label, unit
        self._shown = not quiet and self._console.is_terminal
        self._start = time.perf_counter()
        self._bar: Progress | None = None
        self._task = 0

    def _open(self, counted: bool) -> Progress:
        if self._bar is None:
            columns = ((TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn()) if counted
                       else (TextColumn("{task.description}"), TimeElapsedColumn()))
            self._bar = Progress(*columns, console=self._console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=None, rate="")
        return self._bar

    def __call__(self, done: int, total: int) -> None:
        if not self._shown:
            return
        elapsed = time.perf_counter() - self._start
        if self._bar is None and elapsed < DELAY_S:
            return
        self._open(counted=True).update(self._task, completed=done, total=total,
                                        rate=f"{done / max(elapsed, 1e-9):,.0f} {self._unit}/s")

    def stage(self, text: str) -> None:
        """Show ``text`` (what runs now) beside the label, at once."""
        if self._shown:
            self._open(counted=False).update(self._task, description=f"{self._label}: {text}")

    def __enter__(self) -> LazyProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
