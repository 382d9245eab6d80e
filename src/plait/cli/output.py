"""``--json`` output: strict JSON (:mod:`plait.strict_json`), indented."""

from __future__ import annotations

from typing import Any

from plait import strict_json


def print_json(doc: Any) -> None:
    """Print ``doc`` as strict, indented JSON."""
    print(strict_json.dumps(doc, indent=2))
