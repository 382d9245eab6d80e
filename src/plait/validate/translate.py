"""Turn a measured run into what the estimator takes: model, cluster, and candidate plans.

Knobs a row leaves unknown are filled by ONE rule for every row: enumerate the values
the row allows and keep the feasible (memory-fitting) plan with the best predicted
step time — the assumption that whoever ran it tuned the knob. Unknown: micro-batch
(divisors of the per-replica batch), recompute (none/selective/full), sharding
(none or zero1 over all data-parallel ranks, where the engine has a sharded optimizer: sources that use FSDP/ZeRO-3
say so), sequence parallelism (when
``tp > 1``), virtual stages (divisors of layers per stage, up to 8), the gradient buffer and reduction
dtype (fp32 or bf16; no source states it), and tp/pp (powers
of two up to the node for tp, divisors of the layers for pp, matching ``n_gpus/dp``).
Unknown cp/ep are 1 and an unknown 16-bit precision is bf16 (fp16 has the same peaks).
A row whose system is not named runs on the NVIDIA reference system of its GPU, and a GPU named by family alone
(``h100``) is that system's variant.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.catalog import accelerator_names, get_accelerator, resolve_cluster, with_accelerator
from plait.hardware.cluster import Cluster
from plait.hardware.server import accelerator_slug, gpu_server, server_problem
from plait.plan.plan import Plan
from plait.validate.runs import RunRow
from plait.workload.hf_config import load_hf_config
from plait.workload.model import ModelSpec, MoeSpec

REFERENCE_SYSTEM = {"a100": "dgx-a100-ib", "h100": "dgx-h100-ib", "h200": "dgx-h100-ib", "b200": "b200-dgx",
                    "gb200": "gb200-nvl72", "gb300": "gb300-nvl72", "mi300x": "nd-mi300x-v5", "v100": "dgx2-v100"}
"""GPU family -> the system a row without one runs on: NVIDIA's (or, for the MI300X, Azure's) own multi-node system
of that GPU; the V100's is the DGX-2(H) that Megatron-LM's V100 runs used (Shoeybi et al. 2019, arXiv 1909.08053,
Sec. 5: 32 DGX-2H servers, 512 V100 SXM3 32GB). A PCIe card has none (it is not that system's part)."""
MAX_VPP = 8
GRAD_DTYPES = ("fp32", "bf16")  # where neither row nor engine states it; frameworks offer both
MAX_TP = 8


def row_model(row: RunRow, engine: Engine) -> ModelSpec:
    """The model a row describes: its ``model_config`` with the row's own shape columns where they differ (a run
    may train a truncated proxy of the model), else the shape columns alone, plain-MLP rows GPT-style (LayerNorm,
    learned positions, biases, tied unless the notes say untied)."""
    if row.model_config is not None:
        return _configured_model(row, engine)
    gpt_style = row.mlp == "plain"
    moe = None
    if row.moe_experts:
        moe = MoeSpec(num_experts=row.moe_experts, top_k=row.moe_top_k or 1,
                      expert_ffn_hidden_size=row.moe_ffn_hidden or row.ffn_hidden)
    if row.hidden % row.heads:
        raise ConfigError(f"{row.id}: hidden={row.hidden} must be divisible by heads={row.heads}")
    return ModelSpec(
        name=row.model, num_layers=row.layers, hidden_size=row.hidden, num_heads=row.heads,
        num_kv_heads=row.kv_heads, head_dim=row.hidden // row.heads, ffn_hidden_size=row.ffn_hidden,
        mlp="plain" if gpt_style else "gated", vocab_size=row.vocab, seq_len=row.seq_len,
        tied_embeddings=gpt_style and not row.untied_embeddings, norm="layernorm" if gpt_style else "rmsnorm",
        position="learned" if gpt_style else "rope", attention_bias=gpt_style, mlp_bias=gpt_style,
        dropout=engine.dropout, moe=moe, source=f"row {row.id}",
    )


def _configured_model(row: RunRow, engine: Engine) -> ModelSpec:
    """:func:`row_model` of a row with a ``model_config``."""
    assert row.model_config is not None
    base = load_hf_config(row.model_config)
    moe = base.moe
    if moe is not None and row.moe_experts:
        moe = replace(moe, num_experts=row.moe_experts, top_k=row.moe_top_k or moe.top_k,
                      expert_ffn_hidden_size=row.moe_ffn_hidden or moe.expert_ffn_hidden_size)
    layers = row.layers or base.num_layers
    local = base.local_attention
    if local is not None and layers != base.num_layers:  # a truncated proxy keeps the share of local layers
        local = replace(local, num_layers=round(local.num_layers * layers / base.num_layers))
    return replace(base, name=row.model, num_layers=layers, hidden_size=row.hidden or base.hidden_size,
                   num_heads=row.heads or base.num_heads, num_kv_heads=row.kv_heads or base.num_kv_heads,
                   ffn_hidden_size=row.ffn_hidden or base.ffn_hidden_size, vocab_size=row.vocab or base.vocab_size,
                   seq_len=row.seq_len or base.seq_len, seq_len_basis="" if row.seq_len else base.seq_len_basis, moe=moe, local_attention=local, dropout=engine.dropout,
                   source=f"row {row.id} ({row.model_config.name})")


def row_cluster(row: RunRow) -> Cluster:
    """The row's system with the row's GPU (a system hosts several GPU models, e.g. A100 40/80GB); a GPU named by
    its family alone (``h100``: the source does not say which memory variant) is the reference system's; a GPU of
    no reference family, on one server, a generic server of it (:mod:`plait.hardware.server`). A GPU written as
    tables write it (``NVIDIA H100 80GB HBM3``) is read as the packaged part
    (:func:`plait.hardware.server.accelerator_slug`)."""
    gpu = row.gpu
    if gpu and gpu not in REFERENCE_SYSTEM and gpu not in accelerator_names():
        gpu = accelerator_slug(gpu) or gpu
    system = row.system or next((s for prefix, s in REFERENCE_SYSTEM.items()
                                 if gpu.startswith(prefix) and not gpu.endswith("-pcie")), "")
    if not system:
        if gpu and row.n_gpus and server_problem(gpu, row.n_gpus) is None:
            return gpu_server(gpu, row.n_gpus)
        raise ConfigError(f"{row.id}: no system and no reference system for gpu={row.gpu!r}")
    cluster = resolve_cluster(system)
    if not gpu or (gpu in REFERENCE_SYSTEM and gpu not in accelerator_names()):
        return cluster
    return with_accelerator(cluster, get_accelerator(gpu))


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _layouts(row: RunRow) -> Iterator[tuple[int, int, int]]:
    """(tp, pp, dp) candidates."""
    cp = row.cp or 1
    tps = [row.tp] if row.tp else [t for t in (1, 2, 4, 8) if t <= MAX_TP and row.heads % t == 0]
    for tp in tps:
        pps = [row.pp] if row.pp else _divisors(row.layers, row.layers)
        for pp in pps:
            if row.dp:
                if tp * pp * row.dp * cp == row.n_gpus:
                    yield tp, pp, row.dp
            elif row.n_gpus % (tp * pp * cp) == 0:
                yield tp, pp, row.n_gpus // (tp * pp * cp)


def candidate_plans(row: RunRow, engine: Engine) -> Iterator[Plan]:
    """Every plan consistent with what the row states."""
    if not row.global_batch:
        raise ConfigError(f"{row.id}: global_batch is empty")
    for tp, pp, dp in _layouts(row):
        if row.global_batch % dp:
            continue
        per_replica = row.global_batch // dp
        mbs = [row.micro_batch] if row.micro_batch else _divisors(per_replica, 16)
        offload = row.offload_layers  # a recipe that offloads recomputes nothing (Megatron-Core refuses both)
        recomputes = [row.recompute] if row.recompute else ["none"] if offload is not None else [
            "none", "selective", "full"]
        shardings = [row.sharding] if row.sharding else [
            s for s in ("none", "zero1") if f"sharding={s}" not in engine.unsupported]  # what the engine can run
        stated = row.sequence_parallel if row.sequence_parallel is not None else engine.sequence_parallel
        sps = [False] if tp == 1 else ([stated] if stated is not None else [False, True])
        if pp == 1:
            vpps = [1]
        elif row.vpp:
            vpps = [row.vpp]
        else:
            vpps = [v for v in _divisors(row.layers // pp if row.layers % pp == 0 else 1, MAX_VPP)]
        grads = [engine.grad_reduce_dtype] if engine.grad_reduce_dtype else GRAD_DTYPES
        for mb, rc, sh, sp, vpp, grad in itertools.product(mbs, recomputes, shardings, sps, vpps, grads):
            shard = dp if sh != "none" else 1
            rc_layers = -1
            if rc == "selective" and engine.selective_full_every and (
                    engine.framework.selective_policy != "every_other_mm" or row.selective_layer):
                rc, rc_layers = "full", (row.layers // pp) // engine.selective_full_every
            yield Plan(
                tp=tp, sp=sp, pp=pp, schedule="interleaved" if vpp > 1 else "1f1b", vpp=vpp, cp=row.cp or 1,
                ep=row.ep or 1, dp_replicate=dp // shard, dp_shard=shard, sharding=sh, recompute=rc,  # type: ignore[arg-type]
                recompute_layers=rc_layers, swap_activations=offload is not None,
                swap_layers=-1 if offload is None else offload,
                micro_batch=mb, global_batch=row.global_batch, seq_len=row.seq_len,
                precision=row.precision or "bf16",  # type: ignore[arg-type]
                grad_reduce_dtype=grad, overlap_grad_reduce=engine.overlap_grad_reduce,  # type: ignore[arg-type]
            )
