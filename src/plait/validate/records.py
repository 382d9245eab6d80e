"""Reading a CSV of measured runs once (STYLE.md rule 4): the header checked for the columns a reader needs, every
record for its length, every cell a reader converts for its type and range. Each mistake is one
:class:`ConfigError` naming the file, the line and the column (rule 11), never a ``KeyError`` or ``ValueError``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from plait.errors import ConfigError, read_user_file
from plait.plan.plan import LIMIT


def positive(value: str, column: str, where: str, integer: bool, high: float = math.inf) -> float | None:
    """A positive number at most ``high`` (an integer at most the plan's ``LIMIT`` when ``integer``), or ``None``
    for an empty cell."""
    value = value.strip()
    if not value:
        return None
    kind = "an integer" if integer else "a number"
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{where}: column {column}={value!r} must be {kind}") from None
    if not math.isfinite(number) or number <= 0 or (integer and not number.is_integer()):
        raise ConfigError(f"{where}: column {column}={value!r} must be a positive {kind.split()[-1]}")
    high = min(high, LIMIT) if integer else high
    if number > high:
        raise ConfigError(f"{where}: column {column}={value!r} must be at most {high:,g}")
    return number


def plain(name: str) -> str:
    """``name`` as the validators compare the names of models, layers and datasets other tables write: its letters
    and digits alone, lower-cased (``ResNet-152``, ``resnet152`` and ``RESNET 152`` are one name)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@dataclass(frozen=True)
class Record:
    """One CSV record: its cells by column and where it is (``file:line``)."""

    cells: Mapping[str, str]
    where: str

    def __getitem__(self, column: str) -> str:
        return self.cells[column]

    def get(self, column: str, default: str = "") -> str:
        """The cell of an optional column (``default`` where the file has no such column)."""
        return self.cells.get(column, default)

    def count(self, column: str, default: int | None = None, high: int = LIMIT) -> int:
        """The cell as a positive integer at most ``high``; an empty cell is ``default`` (an error if ``None``)."""
        number = positive(self.get(column), column, self.where, integer=True, high=high)
        if number is None:
            if default is None:
                raise ConfigError(f"{self.where}: column {column} is empty; it must be a positive integer")
            return default
        return int(number)

    def number(self, column: str) -> float:
        """The cell as a positive finite number."""
        number = positive(self.get(column), column, self.where, integer=False)
        if number is None:
            raise ConfigError(f"{self.where}: column {column} is empty; it must be a positive number")
        return number

    def counts(self, column: str, separator: str) -> tuple[int, ...]:
        """The cell as positive integers joined by ``separator`` (``10-25``, ``1024x1024``)."""
        parts = self.get(column).split(separator)
        out = []
        for part in parts:
            number = positive(part, column, self.where, integer=True)
            if number is None:
                raise ConfigError(f"{self.where}: column {column}={self.get(column)!r} must be positive integers "
                                  f"joined by {separator!r}")
            out.append(int(number))
        return tuple(out)


def read_records(path: Path, what: str, required: tuple[str, ...]) -> list[Record]:
    """The records of the CSV at ``path`` (``what`` names it in errors), each with every ``required`` column."""
    reader = csv.DictReader(io.StringIO(read_user_file(path, what), newline=""))
    try:
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"{what} {str(path)!r} lacks column {missing[0]!r}")
        records = []
        for raw in reader:
            where = f"{path.name}:{reader.line_num}"
            if None in raw or None in raw.values():  # DictReader's marks of a record longer or shorter than its header
                given = sum(v is not None for k, v in raw.items() if k is not None) + len(raw.get(None) or [])
                raise ConfigError(f"{where}: the record has {given} fields, the header "
                                  f"{len([k for k in raw if k is not None])}")
            records.append(Record(raw, where))  # type: ignore[arg-type]
        return records
    except csv.Error as exc:
        raise ConfigError(f"{what} {str(path)!r} is not valid CSV: {exc}") from None
