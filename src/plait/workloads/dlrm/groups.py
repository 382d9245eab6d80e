"""The 2D sparse group size searched by ``plait plan`` (000-09: Zhang et al., arXiv 2508.03854): the tables are
placed (:func:`plait.workloads.dlrm.search.plan_tables`) within groups of ``g`` ranks for every ``g`` dividing the
GPU count, each costed by :func:`plait.workloads.dlrm.cost.estimate_dlrm` (smaller all-to-alls within a group, an
all-reduce of every held shard across the ``W / g`` replicas after each step); a size whose tables fit no placement
is kept with its reason. Ranked by step time, then peak memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.model import DlrmSpec
from plait.workloads.dlrm.predict import DlrmPrediction, predict_dlrm


@dataclass(frozen=True)
class GroupOption:
    """One group size: its prediction, or why no placement fits."""

    group: int
    replicas: int
    prediction: DlrmPrediction | None
    refusal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        est = self.prediction.estimate if self.prediction else None
        return {"group": self.group, "replicas": self.replicas, "refused": self.refusal,
                "step_time_s": est.step_s if est else None, "max_memory_bytes": est.max_memory_bytes if est else None}


def group_sizes(gpus: int) -> list[int]:
    """The divisors of ``gpus``, largest first (all ranks in one group: plain sharding)."""
    return [g for g in range(gpus, 0, -1) if gpus % g == 0]


def search_groups(spec: DlrmSpec, cluster: Cluster, gpus: int, global_batch: int,
                  memory_margin: float) -> list[GroupOption]:
    """Every group size's plait placement, the feasible ones by step time then peak memory, then the refused."""
    out = []
    for g in group_sizes(gpus):
        try:
            out.append(GroupOption(g, gpus // g, predict_dlrm(spec, cluster, gpus, global_batch, g,
                                                             memory_margin=memory_margin)))
        except ConfigError as error:
            out.append(GroupOption(g, gpus // g, None, str(error)))
    fits = sorted((o for o in out if o.prediction), key=lambda o: (o.prediction.estimate.step_s,  # type: ignore[union-attr]
                                                                  o.prediction.estimate.max_memory_bytes))  # type: ignore[union-attr]
    return fits + [o for o in out if o.prediction is None]


def _slowest(option: GroupOption) -> tuple[float, float, float]:
    """The slowest rank's lookups, all-to-alls and all-reduces (seconds)."""
    est = option.prediction.estimate  # type: ignore[union-attr]
    r = max(range(len(est.rank_time_s)), key=est.rank_time_s.__getitem__)
    return est.rank_lookup_s[r], est.rank_all_to_all_s[r], est.rank_reduce_s[r]


def explain(ranked: list[GroupOption]) -> str:
    """Why the first group size wins over the next feasible one, by the slowest rank's parts."""
    fits = [o for o in ranked if o.prediction]
    if not fits:
        return "no group size fits: " + "; ".join(f"groups of {o.group}: {o.refusal}" for o in ranked)
    win = fits[0]
    head = f"groups of {win.group} ({win.replicas} replica{'s' if win.replicas > 1 else ''}) win"
    if len(fits) == 1:
        return head + ", the only size that fits"
    other = fits[1]
    ms = [1e3 * x for x in (*_slowest(win), *_slowest(other))]
    return (f"{head}: step {1e3 * win.prediction.estimate.step_s:.3f} ms vs {1e3 * other.prediction.estimate.step_s:.3f}"  # type: ignore[union-attr]
            f" ms for groups of {other.group}; slowest rank lookups {ms[0]:.3f} vs {ms[3]:.3f} ms, all-to-alls "
            f"{ms[1]:.3f} vs {ms[4]:.3f} ms, all-reduces (dense, data-parallel tables, replica sync) {ms[2]:.3f} vs "
            f"{ms[5]:.3f} ms")
