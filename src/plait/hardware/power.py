"""A GPU run below its rated board power: the clock it can sustain, hence its compute peaks.

Dynamic CMOS power is ``P = a C V^2 f`` (Weste & Harris, "CMOS VLSI Design", 4th ed., Sec. 5.1),
and in the DVFS range the supply voltage rises about linearly with the clock, so power
grows as ``f^3`` and a GPU held to ``P_limit`` under a load that draws its rated ``P_tdp``
sustains ``f x (P_limit / P_tdp)^(1/3)``. Compute-bound peaks (tensor and vector FLOP/s) scale
with the clock; HBM bandwidth does not (the memory clock is not power-managed this way).
The cube-root law is an assumption of the physics: it ignores static power (which makes the
real loss larger) and loads that draw less than TDP (which make it smaller).
"""

from __future__ import annotations

from dataclasses import replace

from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator


def clock_scale(tdp_w: float, limit_w: float) -> float:
    """Sustained clock under ``limit_w`` relative to the clock at the rated ``tdp_w`` (1 when not limiting)."""
    if limit_w <= 0:
        raise ConfigError(f"power_limit_w={limit_w} must be > 0")
    if tdp_w <= 0:  # rating unknown (a calibrated machine): the limit cannot be related to it
        return 1.0
    return min(1.0, (limit_w / tdp_w) ** (1.0 / 3.0))


def power_capped(acc: Accelerator, limit_w: float, source: str) -> Accelerator:
    """``acc`` with its FLOP/s peaks scaled to what ``limit_w`` sustains."""
    scale = clock_scale(acc.tdp_w, limit_w)
    if scale >= 1.0:
        return acc
    note = (f"{acc.note} Power-limited to {limit_w:g} W of {acc.tdp_w:g} W ({source}): FLOP/s peaks x{scale:.3f} "
            "by the cube-root clock law (plait.hardware.power).").strip()
    return replace(acc, peak_tflops={k: v * scale for k, v in acc.peak_tflops.items()}, tdp_w=limit_w, note=note)
