"""``--json`` output that is JSON: RFC 8259 has no NaN or Infinity, so a figure that is not finite (a MAPE over
no rows, a rate over no time) is written as ``null``."""

from __future__ import annotations

import json
import math
from typing import Any


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def print_json(doc: Any) -> None:
    """Print ``doc`` as strict, indented JSON."""
    print(json.dumps(_finite(doc), indent=2, allow_nan=False))
