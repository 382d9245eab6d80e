"""An exported configuration: the text to write and what did not translate."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from plait.errors import check_writable, refuse_overwrite


@dataclass(frozen=True)
class Artifact:
    """One file for one target engine."""

    filename: str
    """Suggested file name."""
    text: str
    """File contents."""
    notes: list[str] = field(default_factory=list)
    """Plan features the target cannot express, or that need code outside the config."""


def bash_array(filename: str, variable: str, title: str, usage: str, args: list[str], notes: list[str]) -> Artifact:
    """A shell snippet defining ``variable`` as a bash array of ``args``, with the notes as comments."""
    body = " \\\n  ".join(shlex.quote(a) for a in args)
    comments = "".join(f"# note: {n}\n" for n in notes)
    text = f"# {title}\n{comments}# usage: {usage}\n{variable}=(\n  {body}\n)\n"
    return Artifact(filename, text, notes)


def write_artifacts(directory: Path, artifacts: list[Artifact], *, overwrite: bool = False) -> list[Path]:
    """Write ``artifacts`` into ``directory``; refuses to replace existing files unless ``overwrite``."""
    check_writable(directory, "export folder", folder=True)
    directory.mkdir(parents=True, exist_ok=True)
    targets = [directory / a.filename for a in artifacts]
    for target in targets:
        refuse_overwrite(target, overwrite)
    for target, artifact in zip(targets, artifacts):
        target.write_text(artifact.text, encoding="utf-8")
    return targets
