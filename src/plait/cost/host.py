"""The host stream of a training step and where it joins the device stream.

A PyTorch training step is two streams: the host (CPU) issues every kernel and collective, the device runs them in
issue order. The device can start a kernel only once the host has issued it, and the host runs ahead of the device
until a synchronization makes it wait (a device-to-host copy, ``.item()``, ``event.synchronize()``). Between two
synchronizations a queue of ``n`` kernels issued at host times ``h_1 <= ... <= h_n`` with device times ``d_j``
finishes at ``max_j (h_j + d_j + ... + d_n)``: no sooner than the host's issue time, no sooner than the device's
work (the longer of the two when either dominates). This module counts the host's work and joins the two streams;
every transformer pass uses it (:func:`plait.cost.stage.stage_time` per micro-batch pass, :func:`moe_forward_s`
for a layer that synchronizes inside). A device without a launch queue (a CPU: the host runs each op inside its
call, :attr:`plait.hardware.accelerator.Accelerator.asynchronous_launch`) has no second stream to overlap: there
every op's issue adds to its compute, and a pass takes their sum.

Host time per issued kernel is the accelerator's ``host_launch_us`` (efficiency.toml: the CPU-side launch call of
a kernel, 5-20 us in Meta's HolisticTraceAnalysis docs; 2.75x that on Grace hosts, TransformerEngine #2053), plus,
where the engine issues it from an eager PyTorch op (:attr:`plait.engine.facts.EngineFacts.eager_dispatch`), the
framework's time before that call, ``eager_dispatch_us`` (:mod:`plait.hardware.eager_dispatch`): :func:`issue_s`,
the one rule every workload's host stream uses. Kernels per layer are counted from the model's structure and the engine's facts
(:func:`dense_layer_kernels`); a layer captured in a CUDA graph costs one graph launch per pass instead
(:attr:`plait.engine.facts.EngineFacts.cuda_graph_layers`; CUDA Programming Guide, "CUDA Graphs": a graph is
launched by one ``cudaGraphLaunch`` call, its kernels need no per-kernel CPU launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.cost.fp8_recipe import recipe
from plait.cost.setup import Setup


def issue_s(accelerator: Any, eager: bool) -> float:
    """Host seconds to issue one kernel: its launch call (``host_launch_us``), after the framework's dispatch of the
    op (``eager_dispatch_us``) where ``eager`` PyTorch issues it (module docstring)."""
    eff = accelerator.efficiency
    return (float(eff.host_launch_us.value) + (float(eff.eager_dispatch_us.value) if eager else 0.0)) * 1e-6


def eager_issue(framework: Any) -> bool:
    """Whether an engine's ops pay the framework's dispatch: it runs eager ops, outside CUDA graphs."""
    return bool(framework.eager_dispatch and not framework.cuda_graph_layers)


def _setup_issue_s(setup: Setup) -> float:
    """:func:`issue_s` of a transformer pass: eager dispatch where the engine runs eager ops outside CUDA graphs."""
    return issue_s(setup.cluster.accelerator, eager_issue(setup.framework))


BACKWARD_KERNELS_PER_FORWARD = 2
"""Kernels of a pass's backward per forward kernel: a GEMM's backward is two GEMMs (input and weight gradient), an
elementwise op's backward one or two kernels (assumed: 2, as the FLOP ratio of the backward; Narayanan et al. 2021,
Sec. 3.1)."""


def fp8_quantize_kernels(setup: Setup) -> int:
    """Kernels that quantize one tensor to fp8 in Transformer Engine 2.9: MXFP8 one, ``nvte_quantize_v2``;
    per-tensor current scaling three, amax, scale and cast (csrc/quantizer.cpp L497-536 and L1091-1103;
    docs/research/moe_costs.md section 6); none in bf16. The recipe is the engine's where the run states it, else
    (assumed) MXFP8 on Blackwell and current scaling before it, as Megatron-Bridge's MoE runs name them
    (:func:`plait.cost.fp8_recipe.recipe`)."""
    if setup.gemm_dtype != "fp8":
        return 0
    return 1 if recipe(setup) == "mxfp8" else 3


def _gemms_fwd(setup: Setup, moe_layer: bool) -> int:
    """Forward GEMM calls of a layer's attention and (dense) MLP: q/k/v one fused GEMM or three, the output
    projection, the MLP's up projection (gate and up fused, or two) and down projection; an MoE layer's MLP is
    counted by :func:`moe_kernels` instead (its router GEMM here)."""
    framework, model = setup.framework, setup.model
    qkv = 1 if framework.fused_input_projections else 3
    if moe_layer:
        return qkv + 1 + 1  # + router
    ups = 1 if framework.fused_input_projections or model.mlp != "gated" else 2
    return qkv + 1 + ups + 1


def dense_layer_kernels(setup: Setup, moe_layer: bool = False) -> float:
    """Kernels one layer's forward issues for one micro-batch (its attention block and, for a dense layer, its MLP).

    Fused pointwise ops (Megatron/Transformer Engine kernels, ``torch.compile``): two norms, the GEMMs
    (:func:`_gemms_fwd`), an fp8 quantization of every GEMM input (:func:`fp8_quantize_kernels`), rotary embedding
    of q and k (one kernel each, TE ``fused_apply_rotary_pos_emb``), the attention core (one flash kernel; batched
    GEMMs and a fused scale-mask-softmax, three, unfused), the MLP activation, two residual adds, grouped K/V copied
    out (one). Eager PyTorch runs its Python modules op by op (the ops :func:`plait.cost.layer.eager_extra_bytes_fwd`
    charges the bytes of): an RMSNorm as cast, square, mean, add, rsqrt, multiply, cast, weight multiply (8 kernels
    against 1), rotary embedding as cast, complex multiply and cast per tensor (3 against 1), SwiGLU as silu and
    multiply (2 against 1). Tensor parallelism adds its two collectives per pass (four with sequence parallelism:
    Korthikanti et al. 2022, Sec. 4.2.2)."""
    model, plan, framework = setup.model, setup.plan, setup.framework
    gemms = _gemms_fwd(setup, moe_layer)
    eager = framework.pointwise == "eager"
    norm = 8 if eager and model.norm == "rmsnorm" else 1
    kernels = 2 * norm + gemms + gemms * fp8_quantize_kernels(setup) + 2
    if model.position == "rope":
        kernels += 2 * (3 if eager else 1)
    kernels += 1 if framework.attention_kernel != "unfused" else 3
    if not moe_layer:
        kernels += 2 if eager and model.mlp == "gated" else 1
    if setup.attention_kv_heads > setup.kv_heads_per_rank and not model.mla:
        kernels += 1
    if plan.tp > 1:
        kernels += 4 if plan.sp else 2
    return float(kernels)


def moe_kernels(setup: Setup) -> tuple[float, float]:
    """Kernels (and Python-level ops) of one MoE layer's experts, dispatch and combine for one micro-batch,
    forward and backward: half the engine's fixed kernels each way, and per local expert ``1/3`` of its GEMMs
    forward and ``2/3`` backward plus half its quantized tensors each way, and its Python-level operations
    (:attr:`EngineFacts.moe_launches_fixed`, ``moe_launches_per_expert``, ``moe_quantized_per_expert``,
    ``moe_host_ops_fwd_per_expert``, ``moe_host_ops_bwd_per_expert``; docs/research/moe_costs.md section 2)."""
    framework, model, plan = setup.framework, setup.model, setup.plan
    if model.moe is None:
        return 0.0, 0.0
    experts = model.moe.num_experts // plan.ep
    quantize = framework.moe_quantized_per_expert * fp8_quantize_kernels(setup) / 2
    gemms = framework.moe_launches_per_expert
    fixed = framework.moe_launches_fixed / 2
    return (fixed + experts * (gemms / 3 + quantize + framework.moe_host_ops_fwd_per_expert),
            fixed + experts * (2 * gemms / 3 + quantize + framework.moe_host_ops_bwd_per_expert))


def layer_host_s(setup: Setup, moe_layer: bool) -> tuple[float, float]:
    """Host seconds to issue one layer's forward and backward for one micro-batch (:func:`dense_layer_kernels`,
    twice as many kernels backward, once more the forward's under full recomputation; an MoE layer's experts,
    :func:`moe_kernels`). A layer captured in a CUDA graph issues one graph launch per pass, its MoE part excepted
    (dropless routing sizes its tensors on the host: not capturable, Megatron-Core transformer_config.py
    @0d8e0714 L1567-1573)."""
    launch_s = _setup_issue_s(setup)
    if setup.framework.cuda_graph_layers:
        fwd = bwd = 1.0
    else:
        fwd = dense_layer_kernels(setup, moe_layer)
        bwd = BACKWARD_KERNELS_PER_FORWARD * fwd
        if setup.plan.recompute == "full":
            bwd += fwd
    if moe_layer:
        moe_fwd, moe_bwd = moe_kernels(setup)
        fwd, bwd = fwd + moe_fwd, bwd + moe_bwd
    return fwd * launch_s, bwd * launch_s


def moe_forward_s(setup: Setup, device_s: float, attention_device_s: float) -> float:
    """Forward seconds of an MoE layer whose framework blocks the host on the device in every MoE layer
    (:attr:`EngineFacts.moe_host_sync`): the sync sits after the router, before the dispatch (Megatron-Core
    token_dispatcher.py @0d8e0714 L870-909), so the device's queue is empty when the host resumes, and the experts'
    launches that follow and the next layer's attention, queued before the next sync, run one after the other: with
    the host-bound experts before the attention, the queue ends at ``max(device, host of the experts + max(host,
    device) of the attention)`` (the queue rule of the module docstring), after the host's round trip at the sync
    (:func:`sync_s`). ``device_s``: the layer's forward device
    time; ``attention_device_s``: its attention block's. Without the sync the layer is joined with the others of
    its pass (:func:`exposed_host_s`)."""
    if not setup.framework.moe_host_sync or setup.model.moe is None:
        return device_s
    launch_s = _setup_issue_s(setup)
    experts_s = moe_kernels(setup)[0] * launch_s
    attention_s = (1.0 if setup.framework.cuda_graph_layers else dense_layer_kernels(setup, True)) * launch_s
    if not setup.cluster.accelerator.asynchronous_launch:  # no queue: every launch adds (exposed_host_s)
        return device_s + experts_s + attention_s + sync_s(setup)
    return max(device_s, experts_s + max(attention_s, attention_device_s)) + sync_s(setup)


def sync_s(setup_or_cluster: Any) -> float:
    """Seconds the device idles at one synchronization: the host's round trip (``host_sync_us``)."""
    cluster = getattr(setup_or_cluster, "cluster", setup_or_cluster)
    return float(cluster.accelerator.efficiency.host_sync_us.value) * 1e-6


def step_stall_s(cluster: Any, framework: Any) -> float:
    """Seconds a step loses to the synchronizations outside MoE layers (:attr:`EngineFacts.step_syncs`): one round
    trip each; the host, which ran ahead until then, issues the optimizer's kernels and the next step's first layer
    while the device starts on them (their issue time is hidden unless the pass is host-bound,
    :func:`exposed_host_s`)."""
    return framework.step_syncs * sync_s(cluster)


def exposed_host_s(device_s: Any, host_s: Any, xp: Any, asynchronous: bool = True) -> Any:
    """Seconds a pass waits for its host beyond its device work. With an asynchronous launch queue (a GPU):
    ``max(0, host - device)`` (the queue rule of the module docstring, with the host ahead at the pass's start: a
    pass starts after the previous one's kernels are issued, so only a host slower than the device over the whole
    pass shows). Without one (a CPU device, :attr:`plait.hardware.accelerator.Accelerator.asynchronous_launch`) the
    host runs each op before it issues the next, so every op's dispatch adds to its compute: all of ``host``."""
    if not asynchronous:
        return host_s
    return xp.maximum(host_s - device_s, 0.0)


@dataclass(frozen=True, kw_only=True)
class EagerOptimizer:
    """An optimizer step the host issues tensor by tensor right after a synchronization (a loss scaler's overflow
    flag read back before the step), so the device waits for every launch: PyTorch's for-loop optimizers."""

    launches_per_tensor: int
    """Kernels issued per parameter tensor (its update, its optimizer state's updates, zeroing its gradient)."""
    launches_per_matrix: int
    """Further kernels per parameter tensor of two or more dimensions (weight decay applied to weights only)."""
    source: str
    """Where the counts come from (the optimizer's code and the training loop's synchronization)."""


def eager_optimizer_s(optimizer: EagerOptimizer, shapes: list[tuple[int, ...]], device_s: float,
                      cluster: Any, eager: bool) -> float:
    """Seconds of an :class:`EagerOptimizer` step over tensors of ``shapes``: the host's round trip at the
    synchronization (:func:`sync_s`), then the longer of the host's launches (:func:`issue_s`, with ``eager``
    dispatch where PyTorch issues them) and the device's ``device_s`` (the queue rule of the module docstring, with
    the queue empty at the start)."""
    launches = sum(optimizer.launches_per_tensor + (optimizer.launches_per_matrix if len(s) >= 2 else 0)
                   for s in shapes)
    launch_s = issue_s(cluster.accelerator, eager)
    return sync_s(cluster) + max(device_s, launches * launch_s)
