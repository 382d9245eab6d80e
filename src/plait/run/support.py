"""What this machine can run: checks made before any process group or model exists."""

from __future__ import annotations

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.model import check_supported
from plait.workload.model import ModelSpec


def check_runnable(plan: Plan, model: ModelSpec, on_gpu: bool) -> None:
    """Raise a one-line :class:`ConfigError` for a plan the runtime cannot execute here."""
    check_supported(model)
    if plan.cp > 1 and not on_gpu:
        raise ConfigError(f"cp={plan.cp}: PyTorch's context_parallel runs on CUDA only; this machine has no GPU")
    if plan.precision == "fp8" and not on_gpu:
        raise ConfigError("precision=fp8 needs a GPU with fp8 tensor cores; this machine has none")
    if plan.ep > 1:
        raise ConfigError(f"ep={plan.ep}: the reference model is dense; expert parallelism needs an MoE model")
    if plan.sharding == "zero1" and plan.dp_replicate > 1:
        raise ConfigError("zero1 with dp_replicate > 1 is not supported by the runtime (use zero2/zero3 for HSDP)")
    if plan.sharding == "zero1" and plan.tp > 1:
        raise ConfigError("zero1 with tp > 1: ZeroRedundancyOptimizer does not shard DTensor parameters; "
                          "use zero2/zero3 (FSDP2) with tensor parallelism")
    if plan.sharding == "none" and plan.dp > 1 and (plan.tp > 1 or plan.pp > 1):
        raise ConfigError("plain DDP combines with neither tensor nor pipeline parallelism in PyTorch; "
                          "use sharding zero2/zero3 (FSDP2) for dp with tp or pp")
    if plan.schedule == "zb-h1" and plan.pp > 1 and plan.vpp < 2:
        raise ConfigError("zb-h1 runs as PyTorch's ScheduleInterleavedZeroBubble, which needs vpp >= 2")
    if plan.offload_params and plan.sharding != "zero3":
        raise ConfigError("offload_params needs sharding='zero3' (FSDP2 CPUOffloadPolicy)")
    if plan.offload_optimizer and plan.sharding not in ("zero2", "zero3"):
        raise ConfigError("offload_optimizer runs through FSDP2's CPUOffloadPolicy: use sharding zero2/zero3")
    if plan.tp_comm_overlap and not on_gpu:
        raise ConfigError("tp_comm_overlap (async TP) needs CUDA symmetric memory; this machine has no GPU")
    if model.num_heads % plan.tp or model.num_kv_heads % plan.tp:
        raise ConfigError(f"tp={plan.tp} must divide num_heads={model.num_heads} and num_kv_heads={model.num_kv_heads} "
                          "in the runtime (no KV-head replication)")
