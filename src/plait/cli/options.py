"""The job options estimate, plan, simulate and report share, defined once (the plan they describe:
:func:`plait.plan.defaults.layout_plan`). Each alias below is one option's name, type and help; a command lists the
ones it takes and keeps its own default (``--gpus`` is 8 for a transformer, 1 for a DiT's simulation)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from plait.cli.numbers import MAX_TOKENS, quantity
from plait.engine.catalog import DEFAULT_ENGINE
from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER
from plait.plan.defaults import GPUS
from plait.workload.catalog import DEFAULT_MODEL

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_GPUS", "DEFAULT_MODEL", "ENGINE_HELP", "ENGINE_WORDS"]

DEFAULT_GPUS = GPUS
ENGINE_WORDS = ("Engine that runs the plan: name[@version][[key=value]] (see `plait engines`); plait plan searches "
                "only the plans it can run and exports its configuration.")
ENGINE_HELP = f"{ENGINE_WORDS} [default: the plan file's, else {DEFAULT_ENGINE}]"

# the job: what runs, where, on which engine, or all of it from a plan file
ModelOption = Annotated[str | None, typer.Option(
    "--model", help=f"Catalog model (see `plait models`), Hugging Face config.json or model TOML (with --plan: "
                    f"replaces the plan file's). [default: {DEFAULT_MODEL}]")]
ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", help=f"Cluster preset (see `plait clusters`) or TOML/YAML file (with --plan: replaces the plan "
                      f"file's). [default: {DEFAULT_CLUSTER}]")]
EngineOption = Annotated[str | None, typer.Option("--engine", help=ENGINE_HELP)]
PlanFileOption = Annotated[Path | None, typer.Option(
    "--plan", help="Plan TOML file (tables job and plan); replaces the layout options.")]
GpusOption = Annotated[int, typer.Option("--gpus", help="GPUs; dp = gpus / (tp*pp*cp).")]
GpusRangeOption = Annotated[str | None, typer.Option(
    "--gpus-range", help="LOW:HIGH GPU counts to compare (time, dollars and energy per count, the Pareto front): the powers "
                         "of two between, at most 8.")]
TokensOption = Annotated[float, quantity("Tokens to train, for the time and cost figures.", "--tokens",
                                         "--train-tokens", low=1, high=MAX_TOKENS, low_open=False)]
SeqLenOption = Annotated[int, typer.Option("--seq-len", help="Tokens per sequence (0: the model's).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace existing output files.")]

# the layout of one plan (plait plan searches these instead)
TpOption = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")]
PpOption = Annotated[int, typer.Option("--pp", help="Pipeline stages.")]
VppOption = Annotated[int, typer.Option("--vpp", help="Virtual stages per pipeline rank (interleaved).")]
ScheduleOption = Annotated[str, typer.Option("--schedule", help="gpipe | 1f1b | interleaved | zb-h1.")]
CpOption = Annotated[int, typer.Option("--cp", help="Context-parallel degree.")]
CpAttentionOption = Annotated[str, typer.Option(
    "--cp-attention", help="ring | ulysses | lss: K/V blocks passed around the cp ranks, all-to-alls of the heads, "
                           "or one fused K/V all-gather (LSS Transformer).")]
EpOption = Annotated[int, typer.Option("--ep", help="Expert-parallel degree (MoE).")]
DpReplicateOption = Annotated[int | None, typer.Option(
    "--dp-replicate", help="Data-parallel replicas (HSDP); the rest of dp shards. [default: 1, or dp with "
                           "--sharding none]")]
ShardingOption = Annotated[str | None, typer.Option(
    "--sharding", help="none | zero1 | zero2 | zero3 (FSDP). [default: zero3 when dp shards, else none]")]
SpOption = Annotated[bool | None, typer.Option("--sp/--no-sp", help="Sequence parallelism. [default: on when tp > 1]")]
RecomputeOption = Annotated[str, typer.Option("--recompute", help="none | selective | full.")]
RecomputeLayersOption = Annotated[int, typer.Option(
    "--recompute-layers", help="Layers per stage recomputed with --recompute full (-1: all).")]
MicroBatchOption = Annotated[int | None, typer.Option(
    "--micro-batch", help="Sequences (traced models: examples) per micro-batch. [default: 1; traced models: the "
                          "replica's whole batch]")]
GlobalBatchOption = Annotated[int, typer.Option("--global-batch", help="Sequences per optimizer step.")]
PrecisionOption = Annotated[str, typer.Option("--precision", help="bf16 | fp16 | fp8 | fp32 | tf32 (fp32/tf32: fp32 storage; tf32 needs a TF32 tensor-core peak).")]
OffloadOptimizerOption = Annotated[bool, typer.Option(
    "--offload-optimizer/--no-offload-optimizer", help="Optimizer state in host memory.")]
OffloadParamsOption = Annotated[bool, typer.Option(
    "--offload-params/--no-offload-params", help="Parameters in host memory (zero3).")]
SwapActivationsOption = Annotated[bool, typer.Option(
    "--swap-activations/--no-swap-activations",
    help="Saved activations to host memory in the forward, back for the backward (recompute none).")]
SwapLayersOption = Annotated[int, typer.Option(
    "--swap-layers", help="Layers per stage whose activations --swap-activations moves: the first N (Megatron-Core's "
                          "cpu_offloading_num_layers; -1: every saved tensor).")]
DpSyncOption = Annotated[str | None, typer.Option(
    "--dp-sync", help="Data-parallel synchronization METHOD[:key=value,...]: allreduce, bf16, fp16, powersgd:rank=R, "
                      "topk:ratio=F, quantize:bits=8|4|1, pipe_sgd, local_sgd:every=H, diloco:every=H, "
                      "palsgd:every=H, dreamddp:every=H (with TP and PP too; not with CP); param_server:servers=S, "
                      "switch_aggregation:bits=32|16, gossip:topology=ring|torus|exponential|random|complete|random_ring[,delay=1], "
                      "async_ps:staleness=B, easgd:alpha=A,every=H, crossbow:learners=K. [default: allreduce]")]

# workload kinds' own options that more than one command takes
ParallelOption = Annotated[str | None, typer.Option(
    "--parallel", help="With a DiT TOML: degrees KEY=N,... of cfg, pipefusion, patches, ulysses, ring, tp, "
                       "distrifusion (their product is the GPUs). [default: ulysses=gpus]")]
GnnStrategyOption = Annotated[str, typer.Option(
    "--gnn-strategy", help="With a GNN TOML: sampled_dp (features fetched from their owners) | host_features (read "
                           "over PCIe) | replicated | full_graph (1 GPU) | partition_local (each rank trains inside "
                           "its part) | llcg (local steps, averaged, server-corrected).")]
InputShapeOption = Annotated[str | None, typer.Option(
    "--input-shape", help="With --model MODULE:FACTORY: one example's input shape, e.g. 3,224,224 (the factory's "
                          "example_shape when it has one).")]
InputDtypeOption = Annotated[str | None, typer.Option(
    "--input-dtype", help="With --model MODULE:FACTORY: float32 | bfloat16 | float16 | int64. [default: the "
                          "factory's, else float32]")]
LoaderOption = Annotated[str | None, typer.Option(
    "--loader", help="With --model MODULE:FACTORY: the input pipeline, KIND[:workers=N] (framework_jpeg | dali_cpu "
                     "| dali_gpu | pretokenized | synthetic; N loader workers per GPU); the step waits for the slower "
                     "of loader and device. [default: none costed, the input ready on the device]")]
ChannelsLastOption = Annotated[bool, typer.Option(
    "--channels-last", help="With --model MODULE:FACTORY: convolutions' activations stored NHWC "
                            "(torch.channels_last), so tensor cores run them without layout transposes.")]


LAYOUT_OPTIONS = ("gpus", "tp", "pp", "vpp", "schedule", "cp", "cp_attention", "ep", "dp_replicate", "sharding", "sp",
                  "recompute", "recompute_layers", "micro_batch", "global_batch", "seq_len", "precision",
                  "offload_optimizer", "offload_params", "swap_activations", "swap_layers", "dp_sync")
"""The options that describe a layout, which a plan file (``--plan``) states itself."""


def refuse_layout_with_plan(command: Callable[..., Any], options: dict[str, Any]) -> None:
    """With ``--plan``, a layout option given away from ``command``'s default would be ignored: refused in one line
    naming it (the plan file states the layout)."""
    if options.get("plan_file") is None:
        return
    parameters = inspect.signature(command).parameters
    for name in LAYOUT_OPTIONS:
        if name in parameters and options[name] != parameters[name].default:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} {options[name]}: the plan file (--plan {options['plan_file']}) states the "
                              f"layout; change it there, or drop --plan")
