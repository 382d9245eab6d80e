"""A job: model + cluster + plan + engine, the one typed thing predict, plan, simulate, export and run receive."""

from __future__ import annotations

from dataclasses import dataclass

from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class Job:
    """One training job."""

    model: ModelSpec
    """What is trained."""
    cluster: Cluster
    """Where."""
    plan: Plan
    """How it is parallelised."""
    engine: Engine
    """The software that runs it."""
