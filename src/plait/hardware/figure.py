"""A number with its provenance (STYLE.md rule 7)."""

from __future__ import annotations

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
