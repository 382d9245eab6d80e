"""Bus-bandwidth curves net of the latency the cost model charges beside them.

nccl-tests reports a collective's bus bandwidth as its bus bytes over its whole time (``busbw = algbw x 2(g-1)/g``
for an all-reduce, ``x (g-1)/g`` for an all-gather or reduce-scatter: NVIDIA/nccl-tests doc/PERFORMANCE.md), so a
curve read from it holds each size's latency. :mod:`plait.cost.collectives` charges a collective its per-step
latency and then its bus bytes at the curve's bandwidth (the alpha-beta model of Thakur, Rabenseifner & Gropp 2005,
Sec. 2): on such a curve the latency would count twice. A tier whose curves come from an nccl-tests run says so
with ``curve_ranks`` (the run's ranks); this module takes each size's bandwidth over the time left after the
latency steps the cost model charges that group, the rule ``plait calibrate`` applies to what it measures
(:func:`plait.run.calibrate.bus_bandwidths`). Latency plus bytes over the net bandwidth then gives back the measured
time for a group of the measured size. A constant curve is a plateau read at large sizes, where the latency is a
vanishing share of the time: it is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import replace

from plait.hardware.cluster import NetworkTier
from plait.hardware.figure import Curve


def bus_factor(kind: str, ranks: int) -> float:
    """Bus bytes per buffer byte of collective ``kind`` on ``ranks`` ranks (nccl-tests doc/PERFORMANCE.md)."""
    share = (ranks - 1) / ranks
    return 2 * share if kind == "all_reduce" else share


def latency_steps(kind: str, ranks: int) -> int:
    """Latency steps :mod:`plait.cost.collectives` charges collective ``kind`` on ``ranks`` ranks: ring or double
    binary tree, the fewer, for an all-reduce (``all_reduce_s``); ``g - 1`` ring steps otherwise (``_ring_s``)."""
    if kind == "all_reduce":
        return min(2 * (ranks - 1), 2 * math.ceil(math.log2(ranks)))
    return ranks - 1


def net_busbw(kind: str, ranks: int, size_bytes: float, seconds: float, latency_s: float) -> float | None:
    """Bus bandwidth, bytes/s, of a ``size_bytes`` collective ``kind`` measured in ``seconds`` on ``ranks`` ranks,
    taken over the time left after the latency steps the cost model charges; ``None`` where the measured time is no
    longer than those steps (no time left to read a bandwidth from)."""
    left_s = seconds - latency_steps(kind, ranks) * latency_s
    return bus_factor(kind, ranks) * size_bytes / left_s if left_s > 0 else None


def net_fraction(fraction: float, size_bytes: float, kind: str, ranks: int, latency_s: float,
                 line_bytes_per_s: float) -> float:
    """The busbw fraction ``fraction`` of line rate, measured on ``ranks`` ranks for a ``size_bytes`` buffer, taken
    over the time left after the latency steps. A size measured no slower than its latency steps has no time left
    to read a bandwidth from and gets the line rate (as ``plait calibrate``); none is netted past it."""
    bound = max(1.0, fraction)
    seconds = bus_factor(kind, ranks) * size_bytes / (fraction * line_bytes_per_s)  # the time the curve was read from
    busbw = net_busbw(kind, ranks, size_bytes, seconds, latency_s)
    return bound if busbw is None else min(bound, busbw / line_bytes_per_s)


def _net_curve(curve: Curve, kind: str, tier: NetworkTier) -> Curve:
    if len(curve.sizes) < 2:  # a plateau: no size to net at
        return curve
    ranks = tier.curve_ranks
    fractions = tuple(net_fraction(f, m, kind, ranks, tier.latency_s, tier.line_bytes_per_s)
                      for m, f in zip(curve.sizes, curve.fractions))
    note = (f" [net of {latency_steps(kind, ranks)} latency steps of {tier.latency_us:g} us on {ranks} ranks: "
            "plait.hardware.net_curves]")
    return replace(curve, fractions=fractions, source=curve.source + note)


def net_of_latency(tier: NetworkTier) -> NetworkTier:
    """``tier`` with its sized curves net of the latency steps, if they were read from an nccl-tests run
    (``curve_ranks`` > 0); the result says ``curve_ranks = 0``, so netting twice changes nothing."""
    if tier.curve_ranks == 0:
        return tier
    curves = {name: _net_curve(getattr(tier, name), kind, tier) if getattr(tier, name) is not None else None
              for name, kind in (("efficiency", "all_reduce"), ("all_gather_efficiency", "all_gather"),
                                 ("reduce_scatter_efficiency", "reduce_scatter"))}
    return replace(tier, **curves, curve_ranks=0)
