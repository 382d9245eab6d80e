"""Read a TOML data file that ships inside the plait package, its parsed tables kept beside it like bytecode.

Parsing the catalogs (accelerators, efficiency curves, clusters, models, engines: ~350 kB of TOML) is most of what
``plait estimate`` does after its imports. The parsed tables of a file are written once with :mod:`marshal` to the
``__pycache__`` folder beside it, named by the file's length and CRC-32, and read back from there by later
processes: an edited file has another name and is parsed afresh, and a folder that cannot be written (a read-only install,
``PYTHONDONTWRITEBYTECODE``) only means the file is parsed every time. Users' own files are always parsed.
"""

from __future__ import annotations

import importlib
import marshal
import sys
import zlib
from pathlib import Path
from typing import Any


def packaged_toml(package: str, *parts: str) -> dict[str, Any]:
    """The tables of the packaged file ``parts`` under ``package`` (``packaged_toml("plait.hardware", "data",
    "clusters.toml")``), from the parsed copy where one matches the file's bytes."""
    resource = _locate(package, parts)
    data = resource.read_bytes()
    cached = _cache_path(resource, data)
    if cached is not None:
        try:
            return marshal.loads(cached.read_bytes())  # type: ignore[no-any-return]
        except (OSError, EOFError, ValueError, TypeError):  # absent, or not one of ours: parse
            pass
    import tomllib  # a file without a parsed copy only: its parser (and regexes) load here

    tables = tomllib.loads(data.decode("utf-8"))
    if cached is not None and not sys.dont_write_bytecode:
        _write(cached, tables)
    return tables


def _locate(package: str, parts: tuple[str, ...]) -> Any:
    """The packaged file: a path beside the package's ``__init__`` (the package is imported: its module asks), or,
    where the package is not a folder on disk (a zip), importlib.resources' handle, which reads either."""
    path = Path(importlib.import_module(package).__file__ or "").parent.joinpath(*parts)
    if path.is_file():
        return path
    from importlib import resources  # loaded only here: importing it costs a short command ~10 ms

    return resources.files(package).joinpath(*parts)


def _cache_path(resource: Any, data: bytes) -> Path | None:
    """Where the parsed copy of ``resource`` with these bytes lives (``None``: not a file on disk)."""
    if not isinstance(resource, Path):  # inside a zip: nothing is written beside it
        return None
    digest = f"{len(data):x}-{zlib.crc32(data):08x}"  # zlib is loaded already; hashlib's OpenSSL costs ~10 ms
    return resource.parent / "__pycache__" / f"{resource.name}.{digest}.marshal"


def _write(path: Path, tables: dict[str, Any]) -> None:
    """Write the parsed copy; silently nothing where it cannot be written or marshalled (dates, times)."""
    try:
        body = marshal.dumps(tables)
        path.parent.mkdir(exist_ok=True)
        partial = path.with_suffix(f".{id(tables)}.tmp")
        partial.write_bytes(body)
        partial.replace(path)  # whole or absent, for a process reading it meanwhile
        source_name = path.name.rsplit(".", 2)[0]  # clusters.toml of clusters.toml.<hash>.marshal
        for stale in path.parent.glob(f"{source_name}.*.marshal"):  # an earlier version's copy
            if stale != path:
                stale.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass
