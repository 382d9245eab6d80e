"""Step time and memory per rank of a DLRM's sharded embedding tables (:mod:`plait.workloads.dlrm.model`).

Each table is placed by one of TorchRec's sharding types (torchrec.distributed.types.ShardingType) on a
``group`` of ranks; with 2D sparse parallelism (000-09: Zhang et al., arXiv 2508.03854, Sec. 3) the ``W`` ranks form
``W / g`` groups of ``g``, each group holds every table sharded within it, and the groups are data-parallel
replicas of the tables. A rank serves ``B`` samples; its group serves ``G = B g``. Per step, for a table of
``R`` rows of ``d`` elements of ``e`` bytes looked up ``p`` times per sample:

- **Lookups** (HBM-bound): each id reads its row (``d e``); each pooled output is written (``d o``) and its
  gradient read back (``d o``), ``o = 4``: FBGEMM's table-batched embedding pools into fp32 whatever the table's
  dtype (its ``output_dtype`` defaults to ``SparseType.FP32``: torchrec/distributed/batched_embedding_kernel.py
  @1.8.0); the backward fused with row-wise AdaGrad (the optimizer applied in the backward pass: Mudigere et al.,
  ISCA 2022, Sec. 4.2) reads and writes each touched row and its one fp32 state, ``2 d e + 8``:
  ``ids (3 d e k + 8) + 2 samples d o`` bytes on the rank that holds them, ``k`` the kernel's penalty for rows
  narrower than its 128-element block (:func:`block_penalty`).
- **Inputs**: a rank's sparse features travel to the ranks that hold their tables as TorchRec's KeyedJaggedTensor,
  by one all-to-all per sharding type (torchrec/distributed/dist_data.py ``KJTAllToAll`` @1.8.0): the ids (8-byte
  int64) and one length per sample and feature (4-byte int32, as TorchRec's Criteo loader builds them), after a
  header of 3 int64 to each peer (the lengths' and the ids' split sizes and the batch stride:
  ``KJTAllToAllSplitsAwaitable``).
- **table_wise** on rank ``r``: ``r`` looks up all ``G p`` ids; the pooled outputs go back by all-to-all, ``r``
  sending ``B d o`` to each of the ``g - 1`` others (and receiving the gradients back in the backward pass); each
  other rank sends it ``B p`` ids and ``B`` lengths.
- **column_wise** over ``k`` ranks: ``k`` table-wise shards of ``d / k`` columns (each shard gets the ids).
- **row_wise** over the group: ids hash to rows evenly (assumed uniform), each rank looks up ``G p / g``; each
  rank's partial sums of all ``G`` samples are reduce-scattered, ``(g-1)/g G d o`` out of every rank (and
  all-gathered back as gradients); each rank sends every peer the ``B p / g`` ids that fall in its rows and
  ``B`` lengths (the bucketized lengths of all its samples).
- **table_row_wise** over one node of ``L`` ranks: row-wise inside the node, then the node's pooled outputs are
  sent table-wise to the ranks of other nodes; every rank sends each of the ``L`` holders ``B p / L`` ids and
  ``B`` lengths.
- **data_parallel**: every rank holds the table, looks up its own ``B p`` ids and all-reduces the whole table's
  gradient over the group (TorchRec's data-parallel sharding: DDP over the table); no input moves.
- Across the ``W / g`` replicas of 2D sparse parallelism, each rank's fused shards (every sharding type but
  data-parallel) are averaged after every step, weights and optimizer states: every held row, ``d e + 4`` bytes a
  row (row-wise AdaGrad's one fp32 state), all-reduced over the replicas. That is TorchRec's ``DMPCollection.sync``
  (``allreduce_coalesced`` with ``ReduceOp.AVG`` on its replica group, torchrec/distributed/model_parallel.py
  @1.8.0), the implementation of 000-09 (Zhang et al., arXiv 2508.03854) that ``plait run`` trains
  (:mod:`plait.workloads.dlrm.two_d`); the optimizer fused into the backward pass leaves no gradient to reduce.

The dense part (bottom and top MLPs, the interaction) is data-parallel over all ``W`` ranks: its kernels at the
accelerator's rooflines in the job's precision (:mod:`plait.workloads.dlrm.dense`) and one fp32 all-reduce of its
gradients. A step is the busiest rank's lookups, its
all-to-alls on the tier its group spans, the dense compute and the all-reduces, in sequence (no overlap assumed:
TorchRec's train pipeline overlaps the input all-to-all of the next batch only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.dense import dense_s as dense_part_s
from plait.workloads.dlrm.model import DlrmSpec, Table

SHARDINGS = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")
INDEX_BYTES = 8
"""int64 ids, as TorchRec's KeyedJaggedTensor carries them."""
LENGTH_BYTES = 4
"""int32 lengths, one per sample and feature (torchrec/datasets/criteo.py builds them so)."""
HEADER_BYTES = 3 * 8
"""The split sizes each rank sends each peer before an input all-to-all (module docstring)."""
OUTPUT_BYTES = 4
FUSED_COLUMNS = 4
"""A fused shard's width must be a multiple of this (:func:`fused_width_ok`)."""
"""fp32 pooled embeddings and their gradients (module docstring)."""
STATE_BYTES = 4
"""Row-wise AdaGrad: one fp32 accumulator per row (FBGEMM's EXACT_ROWWISE_ADAGRAD)."""
DENSE_STATE_BYTES = 16
"""fp32 weight, gradient and Adam's two moments per dense parameter."""


@dataclass(frozen=True)
class Placement:
    """Where one table lives: its sharding type and the group ranks (``0 .. g-1``) holding its shards."""

    table: str
    sharding: str
    ranks: tuple[int, ...]


@dataclass
class RankLoad:
    """One rank's share of a step (bytes)."""

    lookup_bytes: float = 0.0
    lookup_fwd_bytes: float = 0.0
    """The forward's share of ``lookup_bytes``: each id's row read, each pooled output written (the backward: the
    rest, :mod:`plait.workloads.dlrm.fused`)."""
    pooled_out: float = 0.0
    """Pooled embeddings (or partial sums) this rank sends in the forward all-to-all; it receives as many
    gradients in the backward one."""
    pooled_in: float = 0.0
    index_out: float = 0.0
    """Ids and lengths this rank sends in the input all-to-alls."""
    index_in: float = 0.0
    header_bytes: float = 0.0
    """Split sizes sent to the peers (as many received)."""
    dense_reduce_bytes: float = 0.0
    """Gradients of data-parallel tables, all-reduced over every rank."""
    replica_weight_bytes: float = 0.0
    """Held fused shards' weights all-reduced across the 2D replicas after each step."""
    replica_state_bytes: float = 0.0
    """Their row-wise AdaGrad states, all-reduced likewise."""
    table_bytes: float = 0.0
    state_bytes: float = 0.0
    tables: list[str] = field(default_factory=list)

    @property
    def replica_reduce_bytes(self) -> float:
        """Bytes all-reduced across the 2D replicas after each step (module docstring)."""
        return self.replica_weight_bytes + self.replica_state_bytes

    @property
    def a2a_bytes(self) -> float:
        """Bytes through the rank's link in its busier direction, the forward and backward all-to-alls of pooled
        embeddings (each way mirrored) and the forward ones of the inputs."""
        pooled = max(self.pooled_out, self.pooled_in)
        return 2 * pooled + max(self.index_out, self.index_in) + self.header_bytes


def check_placement(table: Table, place: Placement, group: int, node: int) -> None:
    """One-line refusals of a placement that cannot hold ``table``."""
    if place.sharding not in SHARDINGS:
        raise ConfigError(f"table {table.name}: sharding {place.sharding!r} must be one of {', '.join(SHARDINGS)}")
    if not place.ranks or min(place.ranks) < 0 or max(place.ranks) >= group:
        raise ConfigError(f"table {table.name}: ranks {place.ranks} must be ranks of the group 0..{group - 1}")
    if place.sharding != "column_wise" and len(set(place.ranks)) != len(place.ranks):  # column shards may share
        raise ConfigError(f"table {table.name}: {place.sharding} takes distinct ranks, got {place.ranks}")
    if place.sharding == "table_wise" and len(place.ranks) != 1:
        raise ConfigError(f"table {table.name}: table_wise takes one rank, got {place.ranks}")
    if place.sharding == "column_wise" and table.dim % len(place.ranks):
        raise ConfigError(f"table {table.name}: column_wise over {len(place.ranks)} ranks must divide dim={table.dim}")
    if place.sharding == "row_wise" and len(place.ranks) != group:
        raise ConfigError(f"table {table.name}: row_wise spreads rows over all {group} ranks of the group")
    if place.sharding == "table_row_wise" and (len({r // node for r in place.ranks}) != 1 or len(place.ranks) != node):
        raise ConfigError(f"table {table.name}: table_row_wise takes the {node} ranks of one node, got {place.ranks}")
    if place.sharding == "data_parallel" and len(place.ranks) != group:
        raise ConfigError(f"table {table.name}: data_parallel holds the table on all {group} ranks")
    width = table.dim // len(place.ranks) if place.sharding == "column_wise" else table.dim
    if not fused_width_ok(place.sharding, width):
        raise ConfigError(f"table {table.name}: {place.sharding} shards of {width} columns must be a multiple of "
                          f"{FUSED_COLUMNS} wide (FBGEMM's fused kernel); place it data_parallel")


def rows_ok(spec: DlrmSpec, table: Table) -> bool:
    """Whether ``table`` may be sharded by rows (row-wise, table-row-wise) whatever the others' placements: TorchRec
    mean-pools such a table by summing its shards and dividing after the reduce-scatter, and its divisor keeps the
    ids per sample of every feature not sharded by rows, so those tables' outputs are divided too (embeddingbag.py
    ``_create_mean_pooling_divisor`` @1.8.0; a run gave losses 1e-3 off one process): a mean-pooled table is kept off
    rows unless every other table has one id per sample."""
    return table.pooling_mode != "mean" or all(t.pooling == 1 for t in spec.tables if t.name != table.name)


def fused_width_ok(sharding: str, width: int) -> bool:
    """Whether a shard of ``width`` columns can be placed so: every sharding type but data-parallel runs FBGEMM's
    table-batched kernel with the fused optimizer, which takes rows of a multiple of 4 elements (TorchRec asserts it
    in ``BatchedFusedEmbeddingBag.__init__``, ``_assert_local_cols_divisible_by_4``,
    torchrec/distributed/batched_embedding_kernel.py @1.8.0; fbgemm_gpu ``construct_split_state`` likewise);
    data-parallel tables take TorchRec's dense kernel, any width (a Wide & Deep model's 1-wide tables)."""
    return sharding == "data_parallel" or width % FUSED_COLUMNS == 0


def rank_loads(spec: DlrmSpec, placements: list[Placement], group: int, replicas: int, batch: int,
               node: int) -> list[RankLoad]:
    """Per group rank, its bytes of one step (module docstring); ``batch`` samples per rank, ``node`` ranks per
    node."""
    by_name = {t.name: t for t in spec.tables}
    names = [p.table for p in placements]
    if sorted(names) != sorted(by_name):
        raise ConfigError(f"placements must name every table once: got {sorted(names)}, tables {sorted(by_name)}")
    loads = [RankLoad() for _ in range(group)]
    g_samples, o = batch * group, OUTPUT_BYTES
    for place in placements:
        t = by_name[place.table]
        check_placement(t, place, group, node)
        e, p, owners = t.element_bytes, t.pooling, place.ranks
        ids, lengths = batch * p * INDEX_BYTES, batch * LENGTH_BYTES  # one rank's samples of this feature
        if place.sharding in ("table_wise", "column_wise"):
            d = t.dim // len(owners)
            for r in owners:
                _lookup(loads[r], g_samples * p, g_samples, d, e)
                _hold(loads[r], t.rows, d, e, t.name)
                loads[r].pooled_out += (group - 1) * batch * d * o
                loads[r].index_in += (group - 1) * (ids + lengths)
            for r in range(group):
                others = len(owners) - owners.count(r)  # shards this rank receives from other ranks
                loads[r].pooled_in += others * batch * d * o
                loads[r].index_out += others * (ids + lengths)
        elif place.sharding in ("row_wise", "table_row_wise"):  # partial sums reduce-scattered in the holders
            share = len(owners)
            for r in owners:
                _lookup(loads[r], g_samples * p / share, g_samples, t.dim, e)
                _hold(loads[r], t.rows / share, t.dim, e, t.name)
                inside = (share - 1) * batch * t.dim * o * group / share  # the holders' G samples' sums
                loads[r].pooled_out += inside + (group - share) * batch * t.dim * o / share
                loads[r].pooled_in += inside
                loads[r].index_in += (group - 1) * (ids / share + lengths)
            for r in range(group):
                loads[r].pooled_in += 0 if r in owners else batch * t.dim * o
                loads[r].index_out += (share - (r in owners)) * (ids / share + lengths)
        else:  # data_parallel
            for r in range(group):
                _lookup(loads[r], batch * p, batch, t.dim, e)
                _hold(loads[r], t.rows, t.dim, e, t.name)
                loads[r].dense_reduce_bytes += t.rows * t.dim * 4.0  # the whole table's gradient, fp32
        if replicas > 1 and place.sharding != "data_parallel":  # 2D: each held shard across the replicas
            rows, width = _shard_shape(t, place)
            for r in owners:
                loads[r].replica_weight_bytes += rows * width * e
                loads[r].replica_state_bytes += rows * STATE_BYTES
    moved = {p.sharding for p in placements} - {"data_parallel"}  # one input all-to-all per sharding type
    for load in loads:
        load.header_bytes = len(moved) * (group - 1) * HEADER_BYTES
    return loads


def _shard_shape(table: Table, place: Placement) -> tuple[float, int]:
    """Rows and columns of each of ``place``'s shards of ``table``."""
    if place.sharding == "column_wise":
        return table.rows, table.dim // len(place.ranks)
    if place.sharding in ("row_wise", "table_row_wise"):
        return table.rows / len(place.ranks), table.dim
    return table.rows, table.dim


def block_penalty(dim: int) -> float:
    """Time per looked-up row of ``dim`` elements relative to its bytes: FBGEMM's table-batched embedding kernel
    gives each row a warp of 32 threads x 4-element vectors (128 elements), so narrower rows leave lanes idle:
    1.15 from 64 to 127 elements, 1.75 from 32 to 63 (TorchRec's ``HALF_BLOCK_PENALTY`` and
    ``QUARTER_BLOCK_PENALTY``, "empirical studies", torchrec/distributed/planner/constants.py @1.8.0, applied in
    its estimator by dimension). Below 32 elements a row is taken to cost a 32-wide one (assumed: the quarter
    block is the kernel's smallest unit)."""
    if dim >= 128:
        return 1.0
    if dim >= 64:
        return 1.15
    return 1.75 * max(1.0, 32 / dim)


def _lookup(load: RankLoad, ids: float, samples: float, dim: int, e: int) -> None:
    load.lookup_bytes += ids * (3 * dim * e * block_penalty(dim) + 2 * STATE_BYTES) + 2 * samples * dim * OUTPUT_BYTES
    load.lookup_fwd_bytes += ids * dim * e * block_penalty(dim) + samples * dim * OUTPUT_BYTES


def _hold(load: RankLoad, rows: float, dim: int, e: int, name: str) -> None:
    load.table_bytes += rows * dim * e
    load.state_bytes += rows * STATE_BYTES
    load.tables.append(name)


@dataclass(frozen=True)
class DlrmEstimate:
    """Per-rank step time and memory of a placement."""

    rank_time_s: tuple[float, ...]
    rank_memory_bytes: tuple[float, ...]
    dense_s: float
    step_s: float
    rank_lookup_s: tuple[float, ...] = ()
    rank_all_to_all_s: tuple[float, ...] = ()
    rank_reduce_s: tuple[float, ...] = ()
    """Each rank's time split into its lookups, its all-to-alls and its all-reduces (they sum to ``rank_time_s``)."""

    @property
    def max_memory_bytes(self) -> float:
        return max(self.rank_memory_bytes)


def estimate_dlrm(spec: DlrmSpec, placements: list[Placement], cluster: Cluster, world: int, batch: int,
                  group: int | None = None, precision: str = "bf16") -> DlrmEstimate:
    """Per-rank time and memory of one step of ``batch`` samples per rank on ``world`` ranks of ``cluster``, tables
    placed within groups of ``group`` ranks (default: all; module docstring), the dense part in ``precision``. A
    rank's time is its lookups, its
    all-to-all bytes over the group's tier (each collective waits for its busiest rank: the step takes the
    largest), and its all-reduces. Groups are strided as TorchRec's ``DMPCollection`` lays them out by default
    (group ``j``: ranks ``j, j + W/g, ...``), so that each shard's replicas are neighbouring ranks, inside a node
    where they fit (its ``use_inter_host_allreduce=False``, model_parallel.py @1.8.0)."""
    group = group or world
    if group <= 0 or world % group:
        raise ConfigError(f"group={group} must divide world={world} (2D sparse parallelism: replicated groups)")
    acc = cluster.accelerator
    node = min(cluster.gpus_per_node, group)
    loads = rank_loads(spec, placements, group, world // group, batch, node)
    hbm = memory_bytes_per_s(acc)
    dense_s = dense_part_s(spec, acc, batch, precision)
    dense_s += float(collective_s(cluster, "all_reduce", world, 1, 4.0 * spec.mlp_params()))
    times, memories, parts = [], [], []
    spread = group / (group - 1) if group > 1 else 1.0  # all_to_all_s takes bytes spread over all g ranks
    pooled = 4 * batch * sum(t.dim * OUTPUT_BYTES for t in spec.tables)  # outputs and gradients, both ways
    every_rank = DENSE_STATE_BYTES * spec.mlp_params() + pooled
    for load in loads:
        a2a = float(collective_s(cluster, "all_to_all", group, world // group, load.a2a_bytes * spread))
        reduce = float(collective_s(cluster, "all_reduce", world, 1, load.dense_reduce_bytes))
        reduce += float(collective_s(cluster, "all_reduce", world // group, 1, load.replica_reduce_bytes))
        parts.append((load.lookup_bytes / hbm, a2a, reduce))
        times.append(sum(parts[-1]))
        memories.append(load.table_bytes + load.state_bytes + every_rank)
    lookup, a2a_s, reduce_s = (tuple(column) for column in zip(*parts, strict=True))
    return DlrmEstimate(tuple(times), tuple(memories), dense_s, max(times) + dense_s, lookup, a2a_s, reduce_s)
