"""Defaults and help text that the commands' options share."""

from __future__ import annotations

from plait.engine.catalog import DEFAULT_ENGINE
from plait.hardware.catalog import DEFAULT_CLUSTER
from plait.plan.defaults import GPUS
from plait.workload.catalog import DEFAULT_MODEL

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_GPUS", "DEFAULT_MODEL", "ENGINE_HELP"]

DEFAULT_GPUS = GPUS
ENGINE_HELP = (f"Engine that runs the plan: name[@version][[key=value]] (see `plait engines`). [default: the plan "
               f"file's, else {DEFAULT_ENGINE}]")
