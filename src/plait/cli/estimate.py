"""``plait estimate``: memory and step time of one plan."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from plait.cli.numbers import MAX_TOKENS, quantity
from plait.cli.options import DEFAULT_GPUS, ENGINE_HELP, plan_from_options, resolve_job
from plait.cli.output import print_json
from plait.cli.render import print_estimate
from plait.cost.estimate import Estimate
from plait.errors import ConfigError
from plait.hardware.mixed import MixedCluster
from plait.hardware.mixed_catalog import mixed_cluster
from plait.plan.defaults import GLOBAL_BATCH, LAYOUT_OPTIONS
from plait.predict.estimate import predict
from plait.workloads import Workload, load, refuse_foreign_options


def estimate_command(
    model: Annotated[str | None, typer.Option(help="Catalog model (see `plait models`), config.json or model TOML. [default: llama3-8b]")] = None,
    cluster: Annotated[str | None, typer.Option(help="Cluster preset (see `plait clusters`) or TOML/YAML file. [default: dgx-h100-ib]")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs; dp = gpus / (tp*pp*cp).")] = DEFAULT_GPUS,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Plan TOML file (tables job and plan); replaces the layout options.")] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline stages.")] = 1,
    vpp: Annotated[int, typer.Option(help="Virtual stages per pipeline rank (interleaved).")] = 1,
    schedule: Annotated[str, typer.Option(help="gpipe | 1f1b | interleaved | zb-h1.")] = "1f1b",
    cp: Annotated[int, typer.Option(help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (MoE).")] = 1,
    dp_replicate: Annotated[int | None, typer.Option(help="Data-parallel replicas (HSDP); the rest of dp shards. [default: 1, or dp with --sharding none]")] = None,
    sharding: Annotated[str | None, typer.Option(help="none | zero1 | zero2 | zero3 (FSDP). [default: zero3 when dp shards, else none]")] = None,
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp", help="Sequence parallelism. [default: on when tp > 1]")] = None,
    recompute: Annotated[str, typer.Option(help="none | selective | full.")] = "none",
    recompute_layers: Annotated[int, typer.Option(help="Layers per stage recomputed with --recompute full (-1: all).")] = -1,
    micro_batch: Annotated[int | None, typer.Option(help="Sequences (traced models: examples) per micro-batch. [default: 1; traced models: the replica's whole batch]")] = None,
    global_batch: Annotated[int, typer.Option(help="Sequences per optimizer step.")] = GLOBAL_BATCH,
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence (0: the model's).")] = 0,
    precision: Annotated[str, typer.Option(help="bf16 | fp16 | fp8.")] = "bf16",
    offload_optimizer: Annotated[bool, typer.Option(help="Optimizer state in host memory.")] = False,
    offload_params: Annotated[bool, typer.Option(help="Parameters in host memory (zero3).")] = False,
    dp_sync: Annotated[str | None, typer.Option(help="Data-parallel synchronization METHOD[:key=value,...]: allreduce, bf16, fp16, powersgd:rank=R, topk:ratio=F, quantize:bits=8|4|1, pipe_sgd, local_sgd:every=H, diloco:every=H, palsgd:every=H, dreamddp:every=H (with TP and PP too; not with CP); param_server:servers=S, switch_aggregation:bits=32|16, gossip:topology=ring|torus|exponential|random|complete, async_ps:staleness=B, easgd:alpha=A,every=H. [default: allreduce]")] = None,
    train_tokens: Annotated[float, quantity("Tokens to train for the time and cost figures.", low=1, high=MAX_TOKENS,
                                            low_open=False)] = 1e12,
    simulate: Annotated[bool | None, typer.Option("--simulate/--closed-form", help="Time the pipeline by the event simulation or by the closed forms (within 2%). [default: simulate pipelines of <= 192 chunk passes]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    input_shape: Annotated[str | None, typer.Option(help="With --model MODULE:FACTORY: one example's input shape, e.g. 3,224,224 (the factory's example_shape when it has one).")] = None,
    input_dtype: Annotated[str | None, typer.Option(help="With --model MODULE:FACTORY: float32 | bfloat16 | float16 | int64. [default: the factory's, else float32]")] = None,
    placements: Annotated[str | None, typer.Option(help="With a DLRM TOML: each table's sharding, e.g. t0=row_wise,t1=table_wise@3,t2=column_wise@0+1 (table_wise, column_wise, row_wise, table_row_wise, data_parallel). [default: plait's planner]")] = None,
    sparse_group: Annotated[int | None, typer.Option(help="With a DLRM TOML: ranks that share the tables (2D sparse parallelism: gpus / this many replicas). [default: all]")] = None,
    gnn_strategy: Annotated[str, typer.Option(help="With a GNN TOML: sampled_dp (features fetched from their owners) | host_features (read over PCIe) | replicated | full_graph (1 GPU) | partition_local (each rank trains inside its part) | llcg (local steps, averaged, server-corrected).")] = "sampled_dp",
    gnn_library: Annotated[str, typer.Option(help="With a GNN TOML: pyg (layers on the whole sampled subgraph) | dgl (message-flow graphs; every node redraws each hop).")] = "pyg",
    edge_cut: Annotated[float | None, typer.Option(help="With a GNN TOML: fraction of edges crossing the gpus parts. [default: a random cut, (gpus-1)/gpus]")] = None,
    cache_fraction: Annotated[float, typer.Option(help="With a GNN TOML: fraction of nodes whose features every GPU caches (highest degrees first).")] = 0.0,
    gnn_sampler: Annotated[str, typer.Option(help="With a GNN TOML: loop (a batch at a time) | matrix[:bulk=K][,adjacency=replicated|partitioned] (matrix-based bulk sampling).")] = "loop",
    parallel: Annotated[str | None, typer.Option(help="With a DiT TOML: degrees KEY=N,... of cfg, pipefusion, patches, ulysses, ring, tp, distrifusion (their product is the GPUs). [default: ulysses=gpus]")] = None,
    split: Annotated[str, typer.Option(help="With a mixed cluster: data (replicas on every group, local batches by speed) | pipeline (stages on groups, layers by speed).")] = "data",
    shares: Annotated[str | None, typer.Option(help="With a mixed cluster: each group's share, GROUP=N,... (data: sequences per step; pipeline: layers per stage, e.g. a100=6+6,h100=10+10). [default: every group, balanced by speed]")] = None,
    local_steps: Annotated[str | None, typer.Option(help="With a mixed cluster and --dp-sync local_sgd: local steps per averaging round per group, GROUP=H,...")] = None,
) -> None:
    """Predict memory per GPU and step time of a plan, with breakdowns, MFU, time and cost to train.

    --model MODULE:FACTORY traces any PyTorch module the factory builds (on the meta device: no weights, no GPU);
    its plans take data and pipeline parallelism, and --micro-batch/--global-batch count examples."""
    options = dict(locals())
    workload = load(model)
    refuse_foreign_options(workload.kind, options)
    if workload.kind.estimate is not None:  # the kind prices and prints its own job
        workload.kind.estimate(workload, options)
        return
    mixed = mixed_cluster(cluster)
    if mixed is None and (split != "data" or shares or local_steps):
        raise ConfigError("--split, --shares and --local-steps share a plan among a mixed cluster's groups: pass "
                          "--cluster with a mixed preset (see `plait clusters`)")
    if mixed is not None:
        _estimate_mixed(mixed, workload, options, as_json, train_tokens)
        return
    if workload.kind.price is not None:  # the kind prices the layout options itself
        result = workload.kind.price(workload, options)
    else:
        plan = None
        if plan_file is None:
            plan = plan_from_options(gpus=gpus, micro_batch=1 if micro_batch is None else micro_batch,
                                     **{k: options[k] for k in LAYOUT_OPTIONS})
        result = predict(resolve_job(model, cluster, plan_file, plan, engine), simulate=simulate)
    _show_estimate(result, as_json, train_tokens)


def _show_estimate(result: Estimate, as_json: bool, train_tokens: float) -> None:
    """The estimate as JSON (with its goodput under failures) or as tables."""
    if as_json:
        from plait.predict.goodput import goodput

        out = result.to_dict(train_tokens)
        failures = goodput(result)
        out["goodput"] = {**asdict(failures),
                          "days_with_failures": failures.time_to_train_s(result.time_to_train_s(train_tokens)) / 86400}
        print_json(out)
    else:
        print_estimate(Console(), result, train_tokens)


def _estimate_mixed(cluster: MixedCluster, workload: Workload, options: dict[str, Any], as_json: bool,
                    train_tokens: float) -> None:
    """The mixed-cluster path of ``plait estimate``: the layout options over the shared groups' GPUs."""
    if options["plan_file"] is not None or workload.kind.price is not None:
        raise ConfigError("a mixed cluster takes a catalog or config model and layout options, not --plan or a "
                          "traced module")
    from plait.cli.mixed import mixed_estimate, mixed_shares, print_mixed

    parts = mixed_shares(cluster, options["split"], options["shares"], options["local_steps"])
    gpus = sum(s.num_gpus for s in parts)
    if options["gpus"] not in (DEFAULT_GPUS, gpus):
        raise ConfigError(f"--gpus {options['gpus']}: a plan on a mixed cluster uses its groups' {gpus} GPUs (name "
                          "fewer groups with --shares)")
    layout = plan_from_options(gpus=gpus, micro_batch=options["micro_batch"] or 1,
                               **{k: options[k] for k in LAYOUT_OPTIONS})
    est = mixed_estimate(options["model"], cluster, layout, options["split"], parts, bool(options["shares"]),
                         options["engine"])
    print_mixed(est, as_json, train_tokens)
