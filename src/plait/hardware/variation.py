"""Hypothetical hardware: a cluster with some of its parameters multiplied, and the price that assumes.

A design search (:mod:`plait.search.design`) asks the planner about accelerators and networks that do not exist:
the base cluster's figures (each with its source) multiplied per parameter. Every cluster made here says so in its
name and note (``HYPOTHETICAL``), and its price is an explicit assumption (``design.toml``): each parameter carries a
share of the base price per GPU-hour that scales linearly with it, the rest stays fixed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Literal, get_args

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Figure
from plait.hardware.power_states import PowerStates
from plait.packaged import packaged_toml
from plait.schema import build

Parameter = Literal["peak", "hbm_gib", "hbm_bw", "scale_up_gpus", "scale_up_bw", "scale_out_bw", "price", "power"]
"""What a variation can change: every dense peak (all dtypes), HBM capacity, HBM bandwidth, the scale-up (NVLink)
domain's size and per-GPU bandwidth, the per-GPU bandwidth of every scale-out tier, the price per GPU-hour itself,
and the board power in every state."""
PARAMETERS: tuple[str, ...] = get_args(Parameter)
HYPOTHETICAL = "HYPOTHETICAL"
"""The word every description and output of a varied cluster carries."""


@functools.cache
def default_price_shares() -> dict[str, Figure]:
    """The shares of ``design.toml``, each with its source."""
    table = packaged_toml("plait.hardware", "data", "design.toml")["price_shares"]
    return {name: build(Figure, raw, f"design.toml:price_shares.{name}") for name, raw in table.items()}


@dataclass(frozen=True, kw_only=True)
class Variation:
    """Factors by parameter (absent: 1) applied to a base cluster."""

    factors: tuple[tuple[str, float], ...]
    """(parameter, factor) pairs, each parameter at most once."""

    def __post_init__(self) -> None:
        names = [p for p, _ in self.factors]
        for name, factor in self.factors:
            if name not in PARAMETERS:
                raise ConfigError(f"hardware parameter {name!r} must be one of {', '.join(PARAMETERS)}")
            if not 1e-3 <= factor <= 1000.0:
                raise ConfigError(f"{name} factor {factor:g} must be in [0.001, 1000] (a thousandth to a thousand "
                                  "times the base figure)")
        if len(set(names)) != len(names):
            raise ConfigError(f"hardware parameters {names} name one more than once")

    def factor(self, name: str) -> float:
        """The factor of ``name`` (1 where it is not varied)."""
        return next((f for p, f in self.factors if p == name), 1.0)

    @property
    def label(self) -> str:
        """``peak x1.2, hbm_bw x1.5`` (``base`` where nothing changes)."""
        changed = [f"{p} x{f:g}" for p, f in self.factors if f != 1.0]
        return ", ".join(changed) if changed else "base"


def price_factor(variation: Variation, shares: dict[str, float]) -> float:
    """Price per GPU-hour of the variation over the base's: ``1 + sum_p share_p (f_p - 1)`` (the assumption of
    ``design.toml``), times the ``price`` factor itself."""
    scale = 1.0 + sum(shares.get(p, 0.0) * (f - 1.0) for p, f in variation.factors if p != "price")
    if scale <= 0:
        raise ConfigError(f"variation {variation.label} prices the hardware at {scale:g} x the base; lower its "
                          "price shares or raise its factors")
    return scale * variation.factor("price")


def _scaled_power(power: PowerStates | None, factor: float, label: str) -> PowerStates | None:
    if power is None or factor == 1.0:
        return power

    def scaled(fig: Figure) -> Figure:
        return Figure(value=fig.value * factor, source=f"{HYPOTHETICAL}: x{factor:g} of ({fig.source})")

    return replace(power, busy_w=scaled(power.busy_w), communicating_w=scaled(power.communicating_w),
                   idle_w=scaled(power.idle_w))


def scale_up_size(base: int, factor: float) -> int:
    """The scale-up domain of ``base`` GPUs times ``factor``, rounded to a whole GPU (refused below 1)."""
    size = round(base * factor)
    if size < 1:
        raise ConfigError(f"scale_up_gpus x{factor:g} leaves a domain of {base * factor:g} GPUs; it needs >= 1")
    return size


def vary(base: Cluster, variation: Variation, shares: dict[str, float]) -> Cluster:
    """``base`` with ``variation`` applied, labelled hypothetical, priced by :func:`price_factor`."""
    if not variation.factors or all(f == 1.0 for _, f in variation.factors):
        return base
    acc, f = base.accelerator, variation.factor
    acc = replace(acc, peak_tflops={k: v * f("peak") for k, v in acc.peak_tflops.items()},
                  memory_gib=acc.memory_gib * f("hbm_gib"),
                  memory_bandwidth_gb_per_s=acc.memory_bandwidth_gb_per_s * f("hbm_bw"),
                  scale_up_bandwidth_gb_per_s=acc.scale_up_bandwidth_gb_per_s * f("scale_up_bw"),
                  tdp_w=acc.tdp_w * f("power"), name=f"{acc.name} ({HYPOTHETICAL})")
    domain = scale_up_size(base.scale_up_domain_gpus, f("scale_up_gpus"))
    inner = base.tiers[0]
    if len(base.tiers) > 1 and domain > base.tiers[1].span_gpus:
        raise ConfigError(f"scale_up_gpus x{f('scale_up_gpus'):g} makes a {domain}-GPU domain, wider than the "
                          f"{base.tiers[1].name} tier's {base.tiers[1].span_gpus} GPUs")
    tiers = (replace(inner, span_gpus=domain, bandwidth_gb_per_s_per_gpu=inner.bandwidth_gb_per_s_per_gpu
                     * f("scale_up_bw")),
             *(replace(t, bandwidth_gb_per_s_per_gpu=t.bandwidth_gb_per_s_per_gpu * f("scale_out_bw"))
               for t in base.tiers[1:]))
    price = base.price_per_gpu_hour_usd * price_factor(variation, shares)
    note = (f"{HYPOTHETICAL} hardware: {base.name} with {variation.label}; priced at ${price:.2f}/GPU-hour by the "
            "assumed price shares of design.toml (plait.hardware.variation). " + base.note).strip()
    return replace(base, name=f"{base.name} [{HYPOTHETICAL}: {variation.label}]", accelerator=acc, tiers=tiers,
                   scale_up_domain_gpus=domain, gpus_per_node=min(base.gpus_per_node, domain),
                   price_per_gpu_hour_usd=price, note=note,
                   price_source=f"{HYPOTHETICAL}: {base.price_source} x{price / base.price_per_gpu_hour_usd:.3f} "
                                "(design.toml's assumed price shares)",
                   power=_scaled_power(base.power, f("power"), variation.label))
