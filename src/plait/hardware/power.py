"""A GPU run below its rated board power: the clock it can sustain, hence its compute peaks.

Dynamic CMOS power is ``P = a C V^2 f`` (Weste & Harris, "CMOS VLSI Design", 4th ed., Sec. 5.1). Were all of a
board's power dynamic and its supply voltage proportional to the clock, power would grow as ``f^3`` and a
compute-bound load held to ``P_limit`` of its rated ``P_rated`` would sustain ``(P_limit / P_rated)^(1/3)`` of its
throughput; a voltage held at its floor gives ``P ~ f`` and an exponent of 1. Static power (leakage, HBM, NVLink:
it does not fall with the SM clock) leaves less of a limit to the clock, which raises the exponent above 1/3.

plait takes the law as ``(P_limit / P_rated)^alpha`` with ``alpha`` measured, not assumed: the least-squares slope
through the origin of log(throughput ratio) on log(power ratio) over ``power_cap.toml``'s pairs, NVIDIA's own
MLPerf Inference runs of one compute-bound benchmark on one system at the rated power and under a power limit
(H100 SXM at 300-450 of 700 W, A100 SXM at 300 of 400 W). One exponent holds every pair to within 2%, and the
cube root overstates every pair's throughput (``tests/test_power.py`` asserts both). The pairs are inference
kernels on tensor cores, not training steps; a load that draws less than its rated power unlimited loses less than
they do. Compute-bound peaks (tensor and vector FLOP/s) scale with the clock; HBM bandwidth does not (the memory
clock is not power-managed this way).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator
from plait.packaged import packaged_toml
from plait.schema import build


@dataclass(frozen=True, kw_only=True)
class CapPair:
    """One benchmark's throughput at its board's rated power and under a lower power limit, same system."""

    accelerator: str
    """The catalog accelerator (``accelerators.toml``) the runs used."""
    benchmark: str
    """The benchmark, scenario, precision and round."""
    rated_w: float
    """Board power limit of the uncapped run (the rating), W."""
    limit_w: float
    """Board power limit of the capped run, W."""
    rated_samples_per_s: float
    """Throughput at ``rated_w``."""
    limited_samples_per_s: float
    """Throughput at ``limit_w``."""
    source: str
    """Where both throughputs and the limit are written."""

    def __post_init__(self) -> None:
        if not 0.0 < self.limit_w < self.rated_w:
            raise ConfigError(f"{self.benchmark}: limit_w={self.limit_w} must lie in (0, rated_w={self.rated_w})")
        if not 0.0 < self.limited_samples_per_s <= self.rated_samples_per_s:
            raise ConfigError(f"{self.benchmark}: limited_samples_per_s must lie in (0, rated_samples_per_s]")
        if not self.source.strip():
            raise ConfigError(f"{self.benchmark}: a power-limit pair needs a source")

    @property
    def power_ratio(self) -> float:
        return self.limit_w / self.rated_w

    @property
    def throughput_ratio(self) -> float:
        return self.limited_samples_per_s / self.rated_samples_per_s


@functools.cache
def cap_pairs() -> tuple[CapPair, ...]:
    """``power_cap.toml``'s measured pairs."""
    raw = packaged_toml("plait.hardware", "data", "power_cap.toml")["pairs"]
    return tuple(build(CapPair, row, f"power_cap.toml:pairs[{i}]") for i, row in enumerate(raw))


@functools.cache
def throughput_exponent() -> float:
    """``alpha`` of ``throughput ~ (P_limit / P_rated)^alpha``: least squares through the origin in log-log space
    over :func:`cap_pairs` (``sum(x y) / sum(x^2)``, ``x = ln`` power ratio, ``y = ln`` throughput ratio)."""
    xs = [math.log(p.power_ratio) for p in cap_pairs()]
    ys = [math.log(p.throughput_ratio) for p in cap_pairs()]
    return sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)


def clock_scale(tdp_w: float, limit_w: float) -> float:
    """Sustained clock under ``limit_w`` relative to the clock at the rated ``tdp_w`` (1 when not limiting)."""
    if limit_w <= 0:
        raise ConfigError(f"power_limit_w={limit_w} must be > 0")
    if tdp_w <= 0:  # rating unknown (a calibrated machine): the limit cannot be related to it
        return 1.0
    return min(1.0, (limit_w / tdp_w) ** throughput_exponent())


def power_capped(acc: Accelerator, limit_w: float, source: str) -> Accelerator:
    """``acc`` with its FLOP/s peaks scaled to what ``limit_w`` sustains."""
    scale = clock_scale(acc.tdp_w, limit_w)
    if scale >= 1.0:
        return acc
    note = (
        f"{acc.note} Power-limited to {limit_w:g} W of {acc.tdp_w:g} W ({source}): FLOP/s peaks x{scale:.3f} "
        f"by the measured power-limit law, (limit / rated)^{throughput_exponent():.3f} (plait.hardware.power)."
    )
    return replace(
        acc, peak_tflops={k: v * scale for k, v in acc.peak_tflops.items()}, tdp_w=limit_w, note=note.strip()
    )
