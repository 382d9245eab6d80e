"""A number with its provenance (STYLE.md rule 7)."""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

import bisect
import math
from dataclasses import dataclass

from plait.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One hardware or efficiency figure and where it comes from."""

    value: float
    """The number, in the unit its field name states."""
    source: str
    """Datasheet URL, ``measured by <command> on <date>``, or ``assumed: <why>``."""

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ConfigError(f"figure {self.value} needs a source (datasheet URL, 'measured by ...' or 'assumed: ...')")


def fraction(figure: Figure, where: str) -> float:
    """Return ``figure.value`` after checking it is a fraction in (0, 1]."""
    if not 0.0 < figure.value <= 1.0:
        raise ConfigError(f"{where}={figure.value} must be a fraction in (0, 1]")
    return figure.value


@dataclass(frozen=True, kw_only=True)
class Curve:
    """A fraction that depends on a size (GEMM edge, message bytes), with its provenance.

    Either ``value`` (a constant) or ascending ``sizes`` with matching ``fractions``;
    between points the fraction is interpolated linearly in ``log(size)``, outside
    them it is held at the end points.
    """

    source: str
    """Datasheet URL, ``measured by <command> on <date>``, or ``assumed: <why>``."""
    value: float = 0.0
    """Constant fraction (when no sizes are given)."""
    sizes: tuple[float, ...] = ()
    """Ascending sizes at which the fraction was measured."""
    fractions: tuple[float, ...] = ()
    """Fraction at each size."""

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ConfigError("an efficiency curve needs a source (datasheet URL, 'measured by ...' or 'assumed: ...')")
        if not self.sizes:
            if not self.fractions:
                object.__setattr__(self, "sizes", (1.0,))
                object.__setattr__(self, "fractions", (self.value,))
        if len(self.sizes) != len(self.fractions) or not self.sizes:
            raise ConfigError(f"curve sizes {self.sizes} and fractions {self.fractions} must have the same, non-zero length")
        if any(b <= a for a, b in zip(self.sizes, self.sizes[1:])) or self.sizes[0] <= 0:
            raise ConfigError(f"curve sizes {self.sizes} must be positive and ascending")
        if not all(0.0 < f <= 1.5 for f in self.fractions):
            raise ConfigError(f"curve fractions {self.fractions} must lie in (0, 1.5]")
        logs = tuple(math.log(x) for x in self.sizes)
        object.__setattr__(self, "_logs", logs)
        # per segment i (between points i - 1 and i): its start and span in log(size) and in fraction, for at()
        object.__setattr__(self, "_segments", (None, *(
            (logs[i - 1], logs[i] - logs[i - 1], self.fractions[i - 1], self.fractions[i] - self.fractions[i - 1])
            for i in range(1, len(logs)))))
        object.__setattr__(self, "_last", [(math.nan, 0.0)])  # (size, fraction) of the last interpolation, for at()

    @property
    def peak(self) -> float:
        """The largest fraction on the curve."""
        return max(self.fractions)

    def at(self, size: float) -> float:
        """Fraction at ``size``."""
        sizes = self.sizes
        if size <= sizes[0]:
            return self.fractions[0]
        if size >= sizes[-1]:
            return self.fractions[-1]
        # A GEMM's backward products have its forward's square-equivalent edge (plait.cost.compute): the size just
        # interpolated is asked for again at once. One (size, fraction) pair, replaced whole (safe across threads).
        last_size, last = self._last[0]  # type: ignore[attr-defined]
        if size == last_size:
            return last  # type: ignore[no-any-return]
        logs: tuple[float, ...] = self._logs  # type: ignore[attr-defined]
        x = math.log(size)
        i = bisect.bisect_right(logs, x, 1, len(logs) - 1)  # in [1, len - 1], where rounding puts x on an end too
        log_start, log_span, start, span = self._segments[i]  # type: ignore[attr-defined]
        w = (x - log_start) / log_span
        value = start + w * span
        self._last[0] = (size, value)  # type: ignore[attr-defined]
        return value  # type: ignore[no-any-return]
