"""Each device group's own tensor-parallel degree in a mixed cluster's pipeline split.

A pipeline split over groups with one TP degree gives a slow group's stages as many devices as a fast group's;
the heterogeneous planners give a slower device kind a wider submesh instead (Alpa, Zheng et al., OSDI 2022,
Sec. 5: each stage its own submesh; AMP, Li et al., NeurIPS 2022, Sec. 3: per-device-type layouts; Metis, Um et
al., ATC 2024, Sec. 5: per-device-group stage layouts). Here a group of ``n`` devices at degree ``d`` holds
``n / (d x dp x cp)`` stages, every stage of it at ``d`` (:attr:`plait.plan.plan.Plan.stage_tp`), costed as
:mod:`plait.predict.mixed` costs it. The candidates (:func:`group_degrees`) are bounded: each group at ``t/2``,
``t`` or ``2t`` of the layout's ``t``, a slower group never at a smaller degree than a faster one (the direction
that balances the stages), the :data:`CANDIDATES` that change fewest groups' degree first.
"""

from __future__ import annotations

import itertools

from plait.hardware.mixed import MixedCluster, group_view
from plait.plan.plan import Plan
from plait.search.stage_tp import degree_fits
from plait.workload.model import ModelSpec

CANDIDATES = 3
"""Per-group degree patterns balanced per layout (assumed: each costs a balancing of up to ``MOVES`` estimates;
patterns that move more groups by more rarely win where fewer did not)."""


def group_degrees(model: ModelSpec, cluster: MixedCluster, layout: Plan) -> list[tuple[int, ...]]:
    """Each group's TP degree, for up to :data:`CANDIDATES` patterns that differ between groups: ``t/2``, ``t`` or
    ``2t`` per group where it is an integer, within the group's scale-up domain, meets the uniform rules at that
    degree on the group's view, and gives whole stages (``n`` divisible by ``d x dp x cp``); a group whose device
    has the lower dense 16-bit peak never takes a smaller degree than a faster group's."""
    if layout.pp < 2 or layout.vpp != 1 or model.moe is not None or layout.tp_mode != "1d" or layout.stage_tp:
        return []
    t, width = layout.tp, layout.dp * layout.cp
    options = []
    for group in cluster.groups:
        view = group_view(cluster, group, cluster.num_gpus)
        fit = [d for d in (t // 2 if t % 2 == 0 else 0, t, 2 * t)
               if d >= 1 and group.num_gpus % (d * width) == 0 and degree_fits(model, view, layout, d)]
        options.append(fit)
    peaks = [g.cluster.accelerator.peak_flops("bf16") for g in cluster.groups]  # 16-bit (fp16 where no bf16)
    found = []
    for picked in itertools.product(*options):
        if len(set(picked)) == 1:
            continue
        if any(peaks[i] < peaks[j] and picked[i] < picked[j] for i in range(len(picked)) for j in range(len(picked))):
            continue
        found.append(tuple(picked))
    return sorted(found, key=lambda pat: (sum(d != t for d in pat), pat))[:CANDIDATES]
