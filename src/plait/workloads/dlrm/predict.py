"""A recommendation model's job: a DLRM TOML, a cluster, ranks and a global batch; its tables placed by
plait's planner or by the user, costed per rank (:mod:`plait.workloads.dlrm.cost`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.cost import DlrmEstimate, Placement, RankLoad, estimate_dlrm, rank_loads
from plait.workloads.dlrm.model import DlrmSpec
from plait.workloads.dlrm.search import plan_tables


def parse_placements(text: str, spec: DlrmSpec, group: int) -> list[Placement]:
    """``t0=row_wise,t1=table_wise@1,t2=column_wise@0+1,...``: each table's sharding and its group ranks (default:
    all of them); the cost model's checks refuse the rest."""
    out = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, rest = item.partition("=")
        sharding, _, ranks = rest.partition("@")
        try:
            chosen = tuple(int(r) for r in ranks.split("+")) if ranks else tuple(range(group))
        except ValueError:
            raise ConfigError(f"placement {item!r}: ranks must be whole numbers joined by '+', e.g. t1=column_wise@0+1") from None
        if not eq or not sharding:
            raise ConfigError(f"placement {item!r} must read TABLE=SHARDING[@RANK+RANK...], e.g. t0=row_wise")
        out.append(Placement(name.strip(), sharding.strip(), chosen))
    names = {t.name for t in spec.tables}
    unknown = [p.table for p in out if p.table not in names]
    if unknown:
        raise ConfigError(f"placement names table {unknown[0]!r}, not one of {', '.join(sorted(names))}")
    return out


def placements_text(placements: list[Placement]) -> str:
    """The ``--placements`` text of ``placements`` (:func:`parse_placements` reads it back)."""
    every = {p.sharding: p.ranks for p in placements if p.sharding in ("row_wise", "data_parallel")}
    return ",".join(p.table + "=" + p.sharding + ("" if every.get(p.sharding) == p.ranks and p.ranks == tuple(
        range(len(p.ranks))) else "@" + "+".join(map(str, p.ranks))) for p in placements)


@dataclass(frozen=True)
class DlrmPrediction:
    """One DLRM job's placement and its per-rank cost."""

    spec: DlrmSpec
    cluster: Cluster
    world: int
    batch: int
    """Samples per rank."""
    group: int
    placements: list[Placement]
    estimate: DlrmEstimate
    loads: list[RankLoad]
    chosen_by: str

    def to_dict(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "model": self.spec.name, "cluster": self.cluster.name, "gpus": self.world, "samples_per_rank": self.batch,
            "global_batch": self.batch * self.world, "group": self.group, "chosen_by": self.chosen_by,
            "placements": [{"table": p.table, "sharding": p.sharding, "ranks": list(p.ranks)} for p in self.placements],
            "step_time_s": est.step_s, "dense_s": est.dense_s, "samples_per_s": self.batch * self.world / est.step_s,
            "max_memory_bytes": est.max_memory_bytes,
            "ranks": [{"rank": r, "tables": load.tables, "time_s": est.rank_time_s[r], "lookup_s": est.rank_lookup_s[r],
                       "all_to_all_s": est.rank_all_to_all_s[r], "reduce_s": est.rank_reduce_s[r],
                       "memory_bytes": est.rank_memory_bytes[r], "all_to_all_bytes": load.a2a_bytes}
                      for r, load in enumerate(self.loads)],
        }


def predict_dlrm(spec: DlrmSpec, hardware: Cluster, gpus: int, global_batch: int, group: int | None = None,
                 placements: list[Placement] | None = None, memory_margin: float = 0.05) -> DlrmPrediction:
    """The job's prediction: ``placements`` as given, else plait's planner's (:mod:`plait.workloads.dlrm.search`)."""
    if gpus < 1 or global_batch < gpus or global_batch % gpus:
        raise ConfigError(f"global_batch={global_batch} must be a positive multiple of gpus={gpus} (samples per rank)")
    group = group or gpus
    if gpus % group:
        raise ConfigError(f"group={group} must divide gpus={gpus} (2D sparse parallelism: replicated groups)")
    batch = global_batch // gpus
    if placements is not None:
        placed, chosen_by = placements, "given"
    else:
        placed, chosen_by = plan_tables(spec, hardware, gpus, batch, group, memory_margin), "plait"
    est = estimate_dlrm(spec, placed, hardware, gpus, batch, group)
    node = min(hardware.gpus_per_node, group)
    loads = rank_loads(spec, placed, group, gpus // group, batch, node)
    return DlrmPrediction(spec, hardware, gpus, batch, group, placed, est, loads, chosen_by)
