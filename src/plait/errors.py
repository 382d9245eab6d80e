"""The one exception type for user mistakes (STYLE.md rule 11)."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A user-supplied value breaks a rule; the message names the value and the rule.

    Example: ``ConfigError("tp=3 must divide num_heads=32")``.
    """


def refuse_overwrite(path: Path | None, overwrite: bool) -> None:
    """Raise unless ``path`` is free or ``overwrite`` was asked for: no user file is replaced silently."""
    if path is not None and path.exists() and not overwrite:
        raise ConfigError(f"{str(path)!r} already exists (pass --force to replace it)")
