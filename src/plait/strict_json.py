"""JSON that is JSON: RFC 8259 has no NaN or Infinity, so a figure that is not finite (a MAPE over no rows, a
loss that diverged) is written as ``null``. Used by every ``--json`` output and by ``plait run``'s metrics."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float, however deep in dicts, lists and tuples, replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(doc: Any, indent: int | None = None) -> str:
    """``doc`` as strict JSON."""
    return json.dumps(finite(doc), indent=indent, allow_nan=False)


def print_json(doc: Any) -> None:
    """Print ``doc`` as strict, indented JSON (``--json`` output)."""
    print(dumps(doc, indent=2))
