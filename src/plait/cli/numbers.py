"""The bounds of the numbers the command line takes, checked where they enter (one line naming the option, the
value and the range; ``--help`` shows the range):

- :func:`count`: an integer within ``[low, high]`` (click's ``IntRange``: a value past 64 bits or below the floor is
  refused before it reaches a library that would overflow or loop over it);
- :func:`quantity`: a finite number within its range (click's ``FloatRange``, which lets NaN through: :func:`_finite`
  refuses NaN and infinities).

The ceilings bound the work one command may ask for; each says why it is where it is.
"""

from __future__ import annotations

import math
from typing import Any

import typer

from plait.plan.plan import LIMIT

MAX_COUNT = LIMIT
"""Largest GPU count, batch or length an option takes: the plan's own bound on every integer it holds."""
MAX_TOKENS = 1e18
"""Largest token count to train: over 60,000 times the ~15e12 tokens Llama 3 was pre-trained on (Meta, "The Llama 3
Herd of Models", arXiv 2407.21783, 2024, section 1); past it a time to train is a figure of no run."""
MAX_WORKERS = 1024
"""Most search processes: more than any one machine's cores (the search splits into pieces per worker)."""


def _finite(low: float, low_open: bool) -> Any:
    """A callback refusing NaN, the infinities and (``low_open``) ``low`` itself: what ``FloatRange`` lets through."""
    def check(value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a finite number")
        if value is not None and low_open and value <= low:
            raise typer.BadParameter(f"{value:g} must be above {low:g}")
        return value
    return check


def count(help: str, *names: str, low: int = 1, high: int = MAX_COUNT, **options: Any) -> Any:
    """A ``typer.Option`` (named ``names``, default: from its parameter) of an integer within ``[low, high]``."""
    return typer.Option(*names, help=help, min=low, max=high, **options)


def quantity(help: str, *names: str, low: float = 0.0, high: float | None = None, low_open: bool = True,
             **options: Any) -> Any:
    """A ``typer.Option`` (named ``names``, default: from its parameter) of a finite number above ``low`` (at ``low``
    too unless ``low_open``), at most ``high``."""
    return typer.Option(*names, help=help, min=low, max=high, callback=_finite(low, low_open), **options)
