"""``--json`` output: strict JSON (:mod:`plait.strict_json`), indented."""

from __future__ import annotations

from plait.strict_json import print_json

__all__ = ["print_json"]
