"""plait's embedding placements and TorchRec's sharding plans, both ways.

- :func:`sharding_plan` turns a plait placement into TorchRec's own ``ShardingPlan`` through
  ``torchrec.distributed.sharding_plan.construct_module_sharding_plan`` and its per-table helpers
  (``table_wise(rank=...)``, ``column_wise(ranks=...)``, ``row_wise()``, ``table_row_wise(host_index=...)``,
  ``data_parallel()``), so that TorchRec itself checks it and ``DistributedModelParallel(plan=...)`` runs it.
- :func:`torchrec_placements` asks TorchRec's ``EmbeddingShardingPlanner`` (its enumerator, estimators, greedy
  partitioner) for its plan of the same tables on the same topology and reads it back as plait placements, with
  TorchRec's own estimate of each rank's time (the sum of its shards' ``perf.total``, in TorchRec's unit).

Needs ``torchrec`` with ``fbgemm-gpu-cpu`` (README: the recsys install).
"""

from __future__ import annotations

from typing import Any

from plait.errors import ConfigError
from plait.workloads.dlrm.cost import Placement, fused_width_ok
from plait.workloads.dlrm.model import DlrmSpec

FUSED = "fused"
"""FBGEMM's table-batched embedding with the optimizer fused into the backward pass (TorchRec's
``EmbeddingComputeKernel.FUSED``): the kernel plait's cost model prices. Table-row-wise takes TorchRec's default
kernel for the sharder (``sharding_plan.table_row_wise`` has no kernel argument)."""


def embedding_bags(spec: DlrmSpec, device: str = "meta") -> Any:
    """TorchRec's ``EmbeddingBagCollection`` of the tables (one feature each, ``{table}_ids``, pooled by the table's
    ``pooling_mode``), every width its own (``EmbeddingBagConfig.embedding_dim`` per table)."""
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.modules.embedding_configs import DataType, PoolingType

    types = {"fp32": DataType.FP32, "fp16": DataType.FP16}
    modes = {"sum": PoolingType.SUM, "mean": PoolingType.MEAN}
    tables = [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows,
                                 feature_names=[f"{t.name}_ids"], data_type=types[t.dtype],
                                 pooling=modes[t.pooling_mode]) for t in spec.tables]
    return EmbeddingBagCollection(tables=tables, device=torch.device(device))


def sharding_plan(spec: DlrmSpec, placements: list[Placement], world: int, local_world: int,
                  device_type: str = "cuda", path: str = "") -> Any:
    """TorchRec's ``ShardingPlan`` of ``placements`` (module docstring), for the collection at ``path`` in the model
    (``""``: the collection itself)."""
    from torchrec.distributed import sharding_plan as sp

    per_table = {}
    for place in placements:
        if place.sharding == "table_wise":
            per_table[place.table] = sp.table_wise(rank=place.ranks[0], compute_kernel=FUSED)
        elif place.sharding == "column_wise":
            per_table[place.table] = sp.column_wise(ranks=list(place.ranks), compute_kernel=FUSED)
        elif place.sharding == "row_wise":
            per_table[place.table] = sp.row_wise(compute_kernel=FUSED)
        elif place.sharding == "table_row_wise":
            per_table[place.table] = sp.table_row_wise(host_index=place.ranks[0] // local_world)
        else:
            per_table[place.table] = sp.data_parallel()
    module_plan = sp.construct_module_sharding_plan(embedding_bags(spec), per_param_sharding=per_table,
                                                    local_size=local_world, world_size=world,
                                                    device_type=device_type)
    from torchrec.distributed.types import ShardingPlan

    return ShardingPlan({path: module_plan})


def torchrec_placements(spec: DlrmSpec, world: int, local_world: int, batch: int,
                        hbm_bytes: float) -> tuple[list[Placement], list[float]]:
    """TorchRec planner's placement of the tables (module docstring) and its estimated time per rank."""
    import logging

    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints

    logging.getLogger("torchrec").setLevel(logging.ERROR)
    topology = Topology(world_size=world, compute_device="cuda", local_world_size=local_world, hbm_cap=int(hbm_bytes))
    constraints = {t.name: ParameterConstraints(  # TorchRec's runtime takes narrow tables data-parallel only
        pooling_factors=[t.pooling], sharding_types=None if fused_width_ok("table_wise", t.dim) else ["data_parallel"])
        for t in spec.tables}
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=batch, constraints=constraints)
    plan = planner.plan(embedding_bags(spec), [EmbeddingBagCollectionSharder()])
    placements = []
    for module_plan in plan.plan.values():
        for name, sharding in module_plan.items():  # type: ignore[attr-defined]
            ranks = tuple(sharding.ranks) if sharding.ranks else tuple(range(world))
            placements.append(Placement(name, sharding.sharding_type, ranks))
    per_rank = [0.0] * world
    for option in planner._best_plan or []:  # TorchRec keeps its chosen options with their shard estimates
        for shard in option.shards:
            if shard.perf is not None and shard.rank is not None:
                per_rank[shard.rank] += shard.perf.total
    if len(placements) != len(spec.tables):
        raise ConfigError(f"TorchRec planned {len(placements)} of {len(spec.tables)} tables")
    return placements, per_rank


def plan_json(plan: Any) -> dict[str, Any]:
    """A TorchRec ``ShardingPlan`` as JSON: per table its sharding type, compute kernel, ranks and each shard's
    offsets, sizes and placement (the fields of ``ParameterSharding`` and its ``EnumerableShardingSpec``)."""
    out: dict[str, Any] = {}
    for path, module_plan in plan.plan.items():
        tables = {}
        for name, sharding in module_plan.items():
            shards = getattr(sharding.sharding_spec, "shards", None) or []
            tables[name] = {"sharding_type": sharding.sharding_type, "compute_kernel": sharding.compute_kernel,
                            "ranks": list(sharding.ranks) if sharding.ranks else None,
                            "shards": [{"offsets": list(s.shard_offsets), "sizes": list(s.shard_sizes),
                                        "placement": str(s.placement)} for s in shards]}
        out[path] = tables
    return out
