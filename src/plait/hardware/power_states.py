"""Electrical power of one GPU's share of a cluster, by the state its step is in.

A step's critical path (:class:`plait.cost.estimate.TimeBreakdown`) is spent computing, communicating or waiting;
each state draws its own board power, and every GPU also carries its share of the host and of the network for
the whole step. The figures and their sources live in ``power.toml``; a cluster file may give its own ``power``
table (:class:`PowerStates`), else the catalog derives one from the accelerator's rated board power
(:func:`default_power`). :mod:`plait.cost.energy` turns these and a step's times into joules.
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

import functools
from dataclasses import dataclass, fields
from typing import Any

from plait.errors import ConfigError
from plait.hardware.figure import Figure
from plait.packaged import packaged_toml
from plait.schema import build

MAX_WATTS = 10_000.0
"""Most watts a stated figure may give one GPU's share in one state: a bound on typing mistakes, not physics
(assumed: ten times the rating of the hungriest board in ``accelerators.toml``, B300 at 1,400 W, with room for a
whole node's host share)."""
MAX_PUE = 5.0
"""Largest power usage effectiveness a cluster may state: a bound on typing mistakes, not physics (assumed: twice the
industry average of about 2.5 the Uptime Institute once gave, http://www.datacenterknowledge.com/archives/2011/05/10/
uptime-institute-the-average-pue-is-1-8/; its 2023 survey averages 1.58,
https://intelligence.uptimeinstitute.com/resource/large-data-centers-are-mostly-more-efficient-analysis-confirms)."""


@dataclass(frozen=True, kw_only=True)
class PowerStates:
    """Watts one GPU's share of the cluster draws, per state, with sources."""

    busy_w: Figure
    """Board power while computing (GEMMs, attention, optimizer), W."""
    communicating_w: Figure
    """Board power during an exposed collective or transfer, W."""
    idle_w: Figure
    """Board power while waiting (pipeline bubble, host, input) with its CUDA context held, W."""
    host_w_per_gpu: Figure
    """The GPU's share of its node beside the GPUs (CPUs, DRAM, NICs, NVSwitches, fans), W, for the whole step."""
    network_w_per_gpu: Figure
    """The GPU's share of the scale-out switches and optics, W, for the whole step."""
    pue: Figure
    """Power usage effectiveness of the data centre: facility power over IT power (>= 1)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name).value
            if f.name == "pue":
                if not 1.0 <= value <= MAX_PUE:
                    raise ConfigError(f"power.pue={value} must be in [1, {MAX_PUE:g}] (facility power over IT power)")
            elif not 0.0 <= value <= MAX_WATTS:
                raise ConfigError(f"power.{f.name}={value} must be in [0, {MAX_WATTS:,.0f}] watts")


@functools.cache
def _table() -> dict[str, Any]:
    return packaged_toml("plait.hardware", "data", "power.toml")


def _figure(section: str, key: str) -> Figure:
    return build(Figure, _table()[section][key], f"power.toml:{section}.{key}")


def default_power(tdp_w: float, limit_w: float | None = None) -> PowerStates | None:
    """``power.toml``'s states for a board rated ``tdp_w`` (its busy draw capped at ``limit_w``, the cluster's
    power limit); ``None`` where the rating is unknown (0: a calibrated machine)."""
    if tdp_w <= 0:
        return None
    busy_cap = tdp_w if limit_w is None else min(tdp_w, limit_w)
    states = {}
    for name in ("busy", "communicating", "idle"):
        share = _figure("states", f"{name}_fraction")
        watts = min(share.value * tdp_w, busy_cap)
        states[f"{name}_w"] = Figure(value=watts, source=f"{share.value:g} x {tdp_w:g} W rated board power"
                                     + (f", capped at the {limit_w:g} W power limit" if watts == busy_cap
                                        and limit_w is not None and limit_w < share.value * tdp_w else "")
                                     + f" (power.toml: {share.source})")
    return PowerStates(**states, host_w_per_gpu=_figure("facility", "host_w_per_gpu"),
                       network_w_per_gpu=_figure("facility", "network_w_per_gpu"), pue=_figure("facility", "pue"))
