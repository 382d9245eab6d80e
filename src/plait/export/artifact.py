"""An exported configuration: the text to write and what did not translate."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from plait.errors import ConfigError


@dataclass(frozen=True)
class Artifact:
    """One file for one target engine."""

    filename: str
    """Suggested file name."""
    text: str
    """File contents."""
    notes: list[str] = field(default_factory=list)
    """Plan features the target cannot express, or that need code outside the config."""


def write_artifacts(directory: Path, artifacts: list[Artifact], *, overwrite: bool = False) -> list[Path]:
    """Write ``artifacts`` into ``directory``; refuses to replace existing files unless ``overwrite``."""
    directory.mkdir(parents=True, exist_ok=True)
    targets = [directory / a.filename for a in artifacts]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise ConfigError(f"{existing[0]!r} already exists (pass --force to replace it)")
    for target, artifact in zip(targets, artifacts):
        target.write_text(artifact.text, encoding="utf-8")
    return targets
