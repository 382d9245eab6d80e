"""Whether ``--cluster`` names a mixed cluster, told without loading the mixed-cluster modules for a preset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.hardware.catalog import cluster_names

if TYPE_CHECKING:
    from plait.hardware.mixed import MixedCluster


def mixed_or_none(name: str | None) -> MixedCluster | None:
    """The mixed cluster ``name`` names (a mixed preset, or a TOML file with ``groups``), else ``None``. No name (the
    default cluster) and a homogeneous preset are answered from the cluster catalog alone, so that a plain estimate
    never imports :mod:`plait.hardware.mixed_catalog` (preset names are never mixed presets' names:
    ``tests/test_lazy_imports.py``)."""
    if name is None or name in cluster_names():
        return None
    from plait.hardware.mixed_catalog import mixed_cluster  # mixed presets and files only: kept off a plain estimate

    return mixed_cluster(name)
