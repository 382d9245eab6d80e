"""Which engine a plan is searched, ranked and exported for when the user names none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.engine.engine import Engine

if TYPE_CHECKING:
    from plait.hardware.cluster import Cluster

SITES_ENGINE = "plait"
"""The engine planned for on clusters that span sites (the one that runs every ``dp_sync`` method)."""


def choose_engine(name: str | None, cluster: Cluster) -> Engine:
    """The engine ``name``; without one, :data:`SITES_ENGINE` on a cluster that spans sites, else the default."""
    # Across sites the methods that send less matter most, and only plait's runtime runs them (`plait engines`).
    return get_engine(name or (SITES_ENGINE if cluster.site_gpus else DEFAULT_ENGINE))
