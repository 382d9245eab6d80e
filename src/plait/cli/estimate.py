"""``plait estimate``: memory and step time of one plan.

No ``from __future__ import annotations`` here: typer reads the options' annotations, and string annotations would
be compiled and evaluated anew each time it does (twice per command), the options' types already being built."""

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plait.cli.backend import backend_json, backend_line, check_backend
from plait.cli.cluster_choice import mixed_or_none
from plait.cli.options import (
    DEFAULT_GPUS,
    ChannelsLastOption,
    ClusterOption,
    CpAttentionOption,
    CpOption,
    DpReplicateOption,
    DpSyncOption,
    EngineOption,
    EpOption,
    GlobalBatchOption,
    GnnStrategyOption,
    GpusOption,
    InputDtypeOption,
    InputShapeOption,
    JsonOption,
    LoaderOption,
    MicroBatchOption,
    ModelOption,
    OffloadOptimizerOption,
    OffloadParamsOption,
    ParallelOption,
    PlanFileOption,
    PpOption,
    PrecisionOption,
    RecomputeLayersOption,
    RecomputeOption,
    ScheduleOption,
    SeqLenOption,
    ShardingOption,
    SpOption,
    SwapActivationsOption,
    SwapLayersOption,
    TokensOption,
    TpOption,
    VppOption,
    refuse_layout_with_plan,
)
from plait.cost.estimate import Estimate
from plait.errors import ConfigError
from plait.plan.defaults import GLOBAL_BATCH, layout_plan
from plait.predict.goodput import goodput
from plait.workloads import Workload, load, refuse_engine, refuse_foreign_options

if TYPE_CHECKING:
    from plait.hardware.mixed import MixedCluster


def estimate_command(
    model: ModelOption = None,
    cluster: ClusterOption = None,
    gpus: GpusOption = DEFAULT_GPUS,
    plan_file: PlanFileOption = None,
    engine: EngineOption = None,
    tp: TpOption = 1,
    pp: PpOption = 1,
    vpp: VppOption = 1,
    schedule: ScheduleOption = "1f1b",
    cp: CpOption = 1,
    cp_attention: CpAttentionOption = "ring",
    ep: EpOption = 1,
    dp_replicate: DpReplicateOption = None,
    sharding: ShardingOption = None,
    sp: SpOption = None,
    recompute: RecomputeOption = "none",
    recompute_layers: RecomputeLayersOption = -1,
    micro_batch: MicroBatchOption = None,
    global_batch: GlobalBatchOption = GLOBAL_BATCH,
    seq_len: SeqLenOption = 0,
    precision: PrecisionOption = "bf16",
    offload_optimizer: OffloadOptimizerOption = False,
    offload_params: OffloadParamsOption = False,
    swap_activations: SwapActivationsOption = False,
    swap_layers: SwapLayersOption = -1,
    dp_sync: DpSyncOption = None,
    train_tokens: TokensOption = 1e12,
    simulate: Annotated[bool | None, typer.Option("--simulate/--closed-form", help="Time the pipeline by the event simulation or by the closed forms (within 2%). [default: simulate pipelines of <= 192 chunk passes]")] = None,
    as_json: JsonOption = False,
    input_shape: InputShapeOption = None,
    input_dtype: InputDtypeOption = None,
    loader: LoaderOption = None,
    channels_last: ChannelsLastOption = False,
    placements: Annotated[str | None, typer.Option(help="With a DLRM TOML: each table's sharding, e.g. t0=row_wise,t1=table_wise@3,t2=column_wise@0+1 (table_wise, column_wise, row_wise, table_row_wise, data_parallel). [default: plait's planner]")] = None,
    sparse_group: Annotated[int | None, typer.Option(help="With a DLRM TOML: ranks that share the tables (2D sparse parallelism: gpus / this many replicas). [default: all]")] = None,
    gnn_strategy: GnnStrategyOption = "sampled_dp",
    gnn_library: Annotated[str, typer.Option(help="With a GNN TOML: pyg (layers on the whole sampled subgraph) | dgl (message-flow graphs; every node redraws each hop) | pyg_sampler (PyG's NeighborSampler: DGL's blocks, PyG's kernels) | pyg_sparse (the same over a torch_sparse SparseTensor: fused products for SAGE, GCN and GIN) | spmm (DGL's fused products of the raw inputs; mean = sum, then a division by the in-degrees). [default: pyg, or the GNN's [loop] loader's]")] = "",
    edge_cut: Annotated[float | None, typer.Option(help="With a GNN TOML: fraction of edges crossing the gpus parts. [default: a random cut, (gpus-1)/gpus]")] = None,
    cache_fraction: Annotated[float, typer.Option(help="With a GNN TOML: fraction of nodes whose features every GPU caches (highest degrees first).")] = 0.0,
    gnn_sampler: Annotated[str, typer.Option(help="With a GNN TOML: loop (a batch at a time) | matrix[:bulk=K][,adjacency=replicated|partitioned] (matrix-based bulk sampling) | dgl (DGL's GPU sampler in its loop, with --gnn-library dgl).")] = "loop",
    parallel: ParallelOption = None,
    split: Annotated[str, typer.Option(help="With a mixed cluster: data (replicas on every group, local batches by speed) | pipeline (stages on groups, layers by speed).")] = "data",
    shares: Annotated[str | None, typer.Option(help="With a mixed cluster: each group's share, GROUP=N,... (data: sequences per step; pipeline: layers per stage, e.g. a100=6+6,h100=10+10). [default: every group, balanced by speed]")] = None,
    local_steps: Annotated[str | None, typer.Option(help="With a mixed cluster and --dp-sync local_sgd: local steps per averaging round per group, GROUP=H,...")] = None,
    backend: Annotated[str | None, typer.Option(help="Collective library the job's process groups run on: nccl | mpi | gloo | grpc (figures and sources: src/plait/engine/data/backends.toml); also prints the step on the cluster's own. [default: the engine's, else the cluster's own]")] = None,
    what_if: Annotated[str | None, typer.Option(help="kitsune: also show the step as it would be if a layer's operators ran concurrently as a spatial pipeline (Kitsune, arXiv 2502.18403; hardware features no GPU has today), on a line of its own, never in the prediction.")] = None,
) -> None:
    """Predict memory per GPU and step time of a plan, with breakdowns, MFU, time and cost to train.

    --model MODULE:FACTORY traces any PyTorch module the factory builds (on the meta device: no weights, no GPU);
    its plans take data and pipeline parallelism, and --micro-batch/--global-batch count examples."""
    options = dict(locals())
    workload = _checked_workload(options)
    if workload.kind.estimate is not None:  # the kind prices and prints its own job
        workload.kind.estimate(workload, options)
        return
    mixed = _mixed_cluster(cluster, split, shares, local_steps)
    if mixed is not None:
        _estimate_mixed(mixed, workload, options, as_json, train_tokens)
    elif what_if is not None:
        _estimate_what_if(workload, options, as_json, train_tokens)
    else:
        _estimate_priced(workload, options, backend, as_json, train_tokens)


def _checked_workload(options: dict[str, Any]) -> Workload:
    """The options' workload, once every option it or the cluster refuses has been refused."""
    refuse_layout_with_plan(estimate_command, options)
    workload = load(options["model"])
    refuse_foreign_options(workload.kind, options)
    refuse_engine(workload.kind, options["engine"])
    what_if, backend, cluster = options["what_if"], options["backend"], options["cluster"]
    if what_if is not None:  # before any path that would not show it
        from plait.workloads.transformer.what_if import check_what_if

        check_what_if(what_if, workload, mixed_or_none(cluster) is not None)
    if backend is not None:
        check_backend(backend, workload.kind.estimate is None and mixed_or_none(cluster) is None)
    return workload


def _mixed_cluster(cluster: str | None, split: str, shares: str | None,
                   local_steps: str | None) -> "MixedCluster | None":
    """The mixed cluster ``--cluster`` names, or None; the mixed-only options refused without one."""
    mixed = mixed_or_none(cluster)
    if mixed is None and (split != "data" or shares or local_steps):
        raise ConfigError("--split, --shares and --local-steps share a plan among a mixed cluster's groups: pass "
                          "--cluster with a mixed preset (see `plait clusters`)")
    return mixed


def _estimate_what_if(workload: Workload, options: dict[str, Any], as_json: bool, train_tokens: float) -> None:
    """The estimate shown with the ``--what-if`` step beside it (a JSON key, or a line of its own)."""
    from plait.workloads.transformer.what_if import price_with_what_if, what_if_json, what_if_line

    result, found = price_with_what_if(workload, options)
    _show_estimate(result, as_json, train_tokens, {"what_if": what_if_json(found)})
    if not as_json:
        from plait.terminal import rich_console

        rich_console().print(what_if_line(found))


def _estimate_priced(workload: Workload, options: dict[str, Any], backend: str | None, as_json: bool,
                     train_tokens: float) -> None:
    """The estimate shown, with the step on the cluster's own collective library beside it under ``--backend``."""
    result = workload.kind.price(workload, options)
    if backend is None:
        _show_estimate(result, as_json, train_tokens)
        return
    own = workload.kind.price(workload, {**options, "backend": None})
    _show_estimate(result, as_json, train_tokens, {"backend": backend_json(backend, result, own)})
    if not as_json:
        from plait.terminal import rich_console

        rich_console().print(backend_line(backend, result, own))


def _show_estimate(result: Estimate, as_json: bool, train_tokens: float, extra: dict[str, Any] | None = None) -> None:
    """The estimate as JSON (with its goodput under failures, and ``extra`` keys) or as tables."""
    if as_json:
        from plait.cli.output import print_json  # the JSON writer, as rich for tables: loaded for its format

        out = result.to_dict(train_tokens)
        failures = goodput(result)
        out["goodput"] = {**asdict(failures),
                          "days_with_failures": failures.time_to_train_s(result.time_to_train_s(train_tokens)) / 86400}
        print_json({**out, **(extra or {})})
    else:  # rich (tables) loads only here and where a line is printed: --json has no use for it
        from plait.cli.render import print_estimate
        from plait.terminal import rich_console

        print_estimate(rich_console(), result, train_tokens)


def _estimate_mixed(cluster: "MixedCluster", workload: Workload, options: dict[str, Any], as_json: bool,
                    train_tokens: float) -> None:
    """The mixed-cluster path of ``plait estimate``: the layout options over the shared groups' GPUs."""
    if options["plan_file"] is not None or not workload.kind.mixed:
        raise ConfigError("a mixed cluster takes a catalog or config model and layout options, not --plan or a "
                          "traced module")
    from plait.cli.mixed import mixed_estimate, mixed_shares, print_mixed  # loads the search: mixed clusters only

    parts = mixed_shares(cluster, options["split"], options["shares"], options["local_steps"])
    gpus = sum(s.num_gpus for s in parts)
    if options["gpus"] not in (DEFAULT_GPUS, gpus):
        raise ConfigError(f"--gpus {options['gpus']}: a plan on a mixed cluster uses its groups' {gpus} GPUs (name "
                          "fewer groups with --shares)")
    layout = layout_plan({**options, "gpus": gpus})
    est = mixed_estimate(options["model"], cluster, layout, options["split"], parts, bool(options["shares"]),
                         options["engine"])
    print_mixed(est, as_json, train_tokens)
