"""Which kind of workload a TOML file describes (a DLRM, a GNN, a DiT), read without raising: a file that is not
one is simply not one, and the commands fall back to the catalog and plan files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, parsing


def toml_describes(name: str | None, test: Callable[[dict[str, Any]], bool]) -> bool:
    """``name`` is a readable TOML file whose tables pass ``test``."""
    if name is None or not name.endswith(".toml") or not Path(name).is_file():
        return False
    import tomllib  # here, not at import: a catalog name is no file, and the catalogs have parsed copies

    try:
        return test(tomllib.loads(Path(name).read_text()))
    except (OSError, ValueError, RecursionError):  # TOMLDecodeError, an integer past 4,300 digits, deep nesting
        return False


def read_toml(path: Path) -> dict[str, Any]:
    """The tables of the TOML file at ``path``; a file that cannot be read or parsed is one line naming it."""
    import tomllib  # as in toml_describes

    try:
        with parsing(path, "file"):
            return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
