"""How the training framework implements a plan, where implementations differ in cost.

A Plan says what is parallelised; frameworks differ in how. The defaults describe
current PyTorch/Megatron practice; other values describe documented older or simpler
implementations (each engine's values, with their sources, are in :mod:`plait.engine`).
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

from dataclasses import dataclass
from typing import Literal

AttentionKernel = Literal["flash", "flash1", "unfused"]
ShardUnit = Literal["layer", "module"]
KvExchange = Literal["ring", "allgather"]
BackwardPrefetch = Literal["pre", "post"]
TpLoss = Literal["vocab_parallel", "gathered"]
Pointwise = Literal["fused", "eager"]
SelectivePolicy = Literal["attention_core", "every_other_mm"]
BackendChoice = Literal["", "nccl", "mpi", "gloo", "grpc"]
Fp8Recipe = Literal["by_accelerator", "current", "mxfp8"]


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """Implementation choices that change the cost of the same plan."""

    attention_kernel: AttentionKernel = "flash"
    """Fused flash attention of the FlashAttention-2 generation (Dao 2023) at the accelerator's measured rate;
    ``"flash1"``: a first-generation fused kernel (FlashAttention-1, Dao et al. 2022, and Triton ports of it), the
    same FLOPs and memory at the rate the ``flash1_relative`` curve (hardware/data/kernels.toml) gives; or ``"unfused"``: batched
    GEMMs + softmax that store the score matrix."""
    fp8_recipe: Fp8Recipe = "by_accelerator"
    """How Transformer Engine scales fp8 GEMM inputs (:mod:`plait.cost.fp8_recipe`): ``"current"``, per-tensor
    current scaling (an amax pass before each cast); ``"mxfp8"``, MXFP8 blocks of 32 (Blackwell); or
    ``"by_accelerator"``, not stated: one fused cast per input on the device, and the quantize kernels the
    accelerator's usual recipe launches (MXFP8 where it has an fp4 peak, current scaling before it)."""
    shard_unit: ShardUnit = "layer"
    """ZeRO-3 gather granularity: one flat all-gather per transformer layer (FSDP wrapping, Zhao et al.
    2023) or one all-gather per parameter tensor from per-module hooks that re-gather for recomputation
    (DeepSpeed ZeRO-3 as of 2021, PR #1188)."""
    shard_persist_below: int = 0
    """Parameter tensors with fewer elements than this are never partitioned: every rank keeps them whole, so
    per-module sharding gathers only the larger ones (DeepSpeed ``stage3_param_persistence_threshold``; ZeRO-3 of
    2021 gathers them once per step, ``persistent_parameters`` in deepspeed/runtime/zero/stage3.py v0.3.15).
    0: every tensor is sharded."""
    shard_list_collectives: bool = False
    """Per-module sharding gathers and reduce-scatters one parameter tensor per call through torch's list-form
    collectives, which copy each of the group's ``g`` shards out of (all-gather) or into (reduce-scatter) a flat
    buffer with its own ``copy_`` (DeepSpeed v0.3.15 ``_allgather_param`` and ``_reduce_scatter_gradient`` in
    deepspeed/runtime/zero/partition_parameters.py; torch 1.7-1.8 ``ProcessGroupNCCL::allgather`` and
    ``reduce_scatter`` in torch/lib/c10d/ProcessGroupNCCL.cpp): ``g`` copies per call
    (:mod:`plait.cost.shard_calls`). False: flat buffers, one copy-free call per layer's gradients."""
    shard_copies: bool = False
    """ZeRO-3 copies on the compute stream (FSDP2, torch ``_fully_shard/_fsdp_collectives.py``): after each
    all-gather, ``foreach_all_gather_copy_out`` splits the gathered buffer into the per-parameter tensors
    (``split_with_sizes_copy``: the unsharded parameters read once and written once), and before each
    reduce-scatter ``foreach_reduce_scatter_copy_in`` chunk-cats the unsharded gradients into the buffer in the
    reduce dtype, both on the current stream (the reduce-scatter stream waits on it afterwards). False: the
    gathered buffer is the parameters' storage (FSDP1's ``FlatParameter`` views, DeepSpeed's partitioned
    parameters, Megatron's buffers), nothing copied."""
    pipeline_keeps_gathered: bool = False
    """Under a pipeline, each stage's FSDP parameters stay gathered and its gradients accumulate unsharded, in the
    reduce dtype, over the step's micro-batches, reduce-scattered once after the last backward: PyTorch's
    pipelining runs every backward with ``set_reshard_after_backward(False)`` and
    ``set_requires_gradient_sync(False)`` and reduces in ``perform_reduce_grad`` after all micro-batches
    (torch/distributed/pipelining/stage.py, torch 2.13), and FSDP2 upcasts the accumulated unsharded gradient to
    the reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``). False: the stage reshards after each pass
    (Megatron-FSDP, DeepSpeed)."""
    shard_prefetch: bool = True
    """ZeRO-3 gathers overlap the previous layer's compute (False: issued and awaited in line)."""
    shard_backward_prefetch: BackwardPrefetch = "pre"
    """When the backward gather of the next layer is issued: before the current layer's gradient
    computation, overlapping it (FSDP2; FSDP1 ``BACKWARD_PRE``), or after it (FSDP1 ``BACKWARD_POST``:
    "prefetches the next set of parameters after the current set of parameters' gradient computation",
    torch.distributed.fsdp.BackwardPrefetch docs), so every backward gather waits in line and only
    the reduce-scatter overlaps the next layer's gradients."""
    residual_bytes: int = 2
    """Bytes per element of the residual stream and the norms and adds on it: 2 where parameters are cast
    to bf16 (Megatron, FSDP mixed precision), 4 under ``torch.autocast`` with fp32 parameters, which keeps
    the residual adds in fp32 (type promotion) and runs norms in fp32 (PyTorch AMP op reference: layer_norm
    and the norm family autocast to float32). GEMM outputs and reductions stay bf16 either way."""
    fused_input_projections: bool = True
    """q, k and v are one GEMM, and so are a gated MLP's gate and up projections (Megatron-Core ``linear_qkv`` and
    ``linear_fc1``); False: one GEMM each (``wq``/``wk``/``wv`` and ``w1``/``w3``, as torchtitan and plait's
    runtime build them). Under ``torch.autocast`` each of them casts the hidden state it reads
    (:func:`plait.cost.layer.autocast_bytes_fwd`)."""
    fsdp_casts_params: bool = False
    """``residual_bytes`` holds only where parameters are not sharded by FSDP: FSDP2's ``MixedPrecisionPolicy`` casts
    the gathered parameters to bf16, so a zero2/zero3 plan's residual stream is 2 bytes (plait's runtime)."""
    tp_loss: TpLoss = "vocab_parallel"
    """How the loss meets vocab-parallel logits under TP: a cross-entropy on the local vocabulary shard with
    three all-reduces of one fp32 value per token (Megatron-LM ``_VocabParallelCrossEntropy``: max, predicted
    logit, sum of exponentials; torchtitan ``loss_parallel``), or an all-gather of the full logits before an
    ordinary cross-entropy (``ColwiseParallel(output_layouts=Replicate())``, as ``plait run`` does)."""
    loss_bytes_per_logit: float = 4.0
    """Peak bytes the loss holds per logit on the last stage, forward or backward: 4 is Korthikanti et al.'s
    count (2022, Sec. 4.3: fp32 logits for the softmax, ``4sbv/t``). Engines state theirs
    (data/engines.toml): an eager ``F.cross_entropy(logits.float())`` peaks at 12 in its backward (the saved fp32
    log-probabilities, the fp32 gradient of the NLL and that of the log-softmax; 4 compiled, which saves the bf16
    logits and writes a bf16 gradient), both measured by ``python benchmarks/loss_memory.py``."""
    fp8_weight_cache_bytes: float = 0.0
    """Bytes per transformer-layer parameter of fp8 weight copies an fp8 run keeps across micro-batches beside its
    bf16 weights: Transformer Engine caches each GEMM weight's quantized workspace, rowwise and columnwise (the
    transposed copy its backward reads), when the caller passes ``is_first_microbatch`` (TE
    ``module/linear.py`` ``_fp8_workspaces``, cache_name ``"weight"``), 1 + 1 bytes; 0 where weights are cast
    anew each micro-batch (torchao's float8 training) or are fp8 parameters themselves."""
    pointwise: Pointwise = "fused"
    """How the memory-bound ops between GEMMs run: one kernel per norm, rotary embedding and activation
    (Megatron/Transformer Engine fused kernels, PyTorch's native LayerNorm, or ``torch.compile``), or
    ``"eager"``: PyTorch eager runs a Python reference module op by op, each op reading its inputs from and
    writing its output to HBM — an RMSNorm written as cast, square, mean, scale, cast back and weight multiply
    (torchtitan's ``RMSNorm``), rotary embedding as an fp32 complex multiply (torchtitan/Llama
    ``apply_rotary_emb``) and SwiGLU as separate silu and multiply kernels
    (:func:`plait.cost.layer.eager_extra_bytes_fwd`)."""
    selective_policy: SelectivePolicy = "attention_core"
    """What ``recompute = "selective"`` recomputes: the attention core (softmax and the score matrix, Korthikanti
    et al. 2022, Sec. 4.2.2: Megatron's selective recomputation and plait's runtime), or ``"every_other_mm"``:
    per-op selective checkpointing of every block, which saves the attention kernel's outputs and every other
    matmul's and recomputes the rest (torchtitan's ``SelectiveAC``, :mod:`plait.cost.op_sac`)."""
    fused_cross_entropy: bool = False
    """The loss is one fused softmax cross-entropy kernel each way (flash-attn's ``xentropy``, llm-foundry's
    ``fused_crossentropy``): ``2e`` bytes per logit forward and backward instead of an fp32 softmax's
    (:mod:`plait.cost.loss`)."""
    train_metric_passes: int = 0
    """Cross-entropy passes over each micro-batch's full logits that the trainer runs outside autograd after the
    micro-batch's backward, to update training metrics (Composer 0.13-0.17 calls ``_eval_train_metrics`` after every
    micro-batch's backward and updates each of the model's training metrics; llm-foundry's MPT lists two,
    ``LanguageCrossEntropy`` and ``LanguagePerplexity``, each a ``torch.nn.CrossEntropyLoss`` over the logits;
    :mod:`plait.cost.loss`)."""
    recompute_early_stop: bool = False
    """Full recomputation runs through PyTorch's non-reentrant ``torch.utils.checkpoint``, which stops recomputing a
    block once every tensor its backward saved is rebuilt (on by default since pytorch/pytorch PR #96866, 2023-03,
    PyTorch 2.1; ``set_checkpoint_early_stop`` in torch/utils/checkpoint.py), so the ops after the block's last
    saved tensor are not rerun (:mod:`plait.cost.early_stop`); otherwise the whole forward is recomputed (Megatron's
    and DeepSpeed's checkpoint functions, reentrant ``torch.utils.checkpoint``). llm-foundry's 2023 runs, torchtitan and
    ``plait run`` checkpoint this way (their sources in engines.toml)."""
    sac_saves_attention: bool = True
    """Under ``every_other_mm``, the attention kernel the engine calls is in the policy's save list. torchtitan
    0.3.0 lists the flash, efficient, cuDNN and math SDPA kernels; from 3b85aa31f (2025-06) to 2025-12 it ran
    cuDNN attention first on Blackwell (compute capability 10) while its list held only the flash and efficient
    kernels, so those runs recompute attention (docs/research/torchtitan_memory_versions.md section 1)."""
    kv_repeat: bool = False
    """Grouped-query K/V heads are copied out to one per query head before the attention call (torchtitan's
    ``repeat_kv``, expand + reshape; ``repeat_interleave`` in ``plait run``), so the copy is paid and the attention
    kernel, its saved inputs and a context-parallel K/V exchange all see ``num_heads`` K/V heads; otherwise the
    kernel reads the grouped heads directly (FlashAttention-2 GQA, Transformer Engine)."""
    cp_kv_exchange: KvExchange = "ring"
    """Context-parallel K/V exchange: ring passes overlapped with attention (Liu et al. 2023), or an
    all-gather before attention and a reduce-scatter of their gradients after (PyTorch
    ``context_parallel`` with ``rotate_method='allgather'``), whose per-step merging of partial outputs and
    gradients in fp32 is charged too (:func:`plait.cost.context_parallel.cp_merge_bytes`)."""
    moe_host_sync: bool = False
    """Each MoE layer's forward blocks the host until the device has counted its tokens per expert (Megatron-Core's
    dropless all-to-all dispatcher copies the counts to the host and calls ``d2h_event.synchronize()`` to size the
    all-to-all, megatron/core/transformer/moe/token_dispatcher.py @0d8e0714 L870-909; docs/research/moe_costs.md
    section 1), so the host cannot launch ahead across MoE layers: such a layer takes the longer of its device time
    and the time its host needs to launch its kernels (:func:`plait.cost.host.moe_forward_s`)."""
    moe_launches_fixed: int = 0
    """Kernels one MoE layer launches per micro-batch besides its experts', forward and backward together: router,
    count all-gather, permute, all-to-alls, activation, unpermute and their backward (about 50-70 in Megatron-Core
    with fused permute and router kernels, docs/research/moe_costs.md section 2; split evenly between the passes)."""
    moe_launches_per_expert: int = 0
    """GEMM kernels per local expert and micro-batch: two forward, four backward (Transformer Engine 2.9's
    GroupedLinear launches one cuBLAS GEMM per expert, common/gemm/cublaslt_gemm.cu L924-977)."""
    moe_quantized_per_expert: int = 0
    """Tensors quantized per local expert and micro-batch in an fp8 run, each by the fp8 recipe's kernels
    (:func:`plait.cost.host.fp8_quantize_kernels`): the two expert GEMMs' inputs forward and their output
    gradients backward (TE GroupedLinear ``split_quantize``, a loop over experts, csrc/extensions/cast.cpp
    L496-597)."""
    moe_fp8_padding: bool = False
    """In an fp8 run the experts copy their tokens into rows padded to the fp8 GEMM's alignment per local expert and
    copy the output back (Megatron-Core ``TEGroupedMLP``, experts.py @0d8e0714 L880-887 and L977-978, through
    Transformer Engine's ``Fp8Padding``/``Fp8Unpadding``, which skip the copy only when every expert's count is
    already aligned, TE 2.9 module/fp8_padding.py L121-122): dropless routing leaves the counts unaligned. False where
    the dispatcher pads while it permutes (HybridEP's ``pad_multiple``, token_dispatcher.py @0d8e0714 L1049-1062)."""
    moe_host_ops_fwd_per_expert: int = 0
    """Python-level host operations per local expert in one MoE layer's forward beyond its kernels, each costed as one
    launch: Transformer Engine 2.9's GroupedLinear, for each of its two calls (fc1, fc2), looks up each expert's weight
    workspace (module/grouped_linear.py L137-145) and allocates two output tensors per GEMM ("torch.empty() (2x
    num_gemms calls)", TE issue #1499, maintainer; docs/research/moe_costs.md section 2)."""
    moe_host_ops_bwd_per_expert: int = 0
    """The same in its backward: per call and expert a main_grad lookup (L285), a wgrad buffer (L387-390), the dummy
    wgrad ``handle_custom_ddp_from_mcore`` allocates (L442-472) and Megatron DDP's backward hook of the expert's
    weight (distributed_data_parallel.py L357-366, one hook per parameter)."""
    adamw_per_tensor_ops: bool = False
    """AdamW updates each parameter tensor with separate eager elementwise ops (Composer's ``DecoupledAdamW``, the
    optimizer of llm-foundry's benchmark configs), streaming the bytes :mod:`plait.cost.optimizer_loop` counts
    instead of one fused pass. False: a fused or multi-tensor pass (:func:`plait.cost.dataparallel.optimizer_step_s`).
    The loop's host time is not charged: eight ops per tensor and, in Composer 0.16 (its ``state['step']`` a device
    tensor), one ``.item()`` read per tensor, each a host round trip; FSDP1 hands the optimizer one flat tensor per
    wrapped block, so tens of round trips per step, milliseconds against steps of 0.85 s and more."""
    step_syncs: int = 0
    """Times per step the host waits on the device outside MoE layers, each costing the device one host round trip
    (``host_sync_us``) before the host issues again: Megatron-Core's gradient clipping reads the global norm back
    (``total_norm.item()``, megatron/core/optimizer/clip_grads.py ``get_grad_norm_fp32``), 1; 0 where nothing is
    read back every step (torchtitan's ``clip_grad_norm_`` returns a tensor and its loss is logged every
    ``log_freq`` steps)."""
    cuda_graph_layers: bool = False
    """Every transformer layer's forward and backward are captured in CUDA graphs and replayed with one graph launch
    each (Megatron-Core ``--enable-cuda-graph``/``cuda_graph_scope``, torch.compile ``mode="reduce-overhead"``), so
    the host issues one launch per layer and pass instead of one per kernel (:func:`plait.cost.host.layer_host_s`);
    a dropless MoE layer's experts stay outside the graph. False: every kernel is launched from the host (the
    engines' defaults)."""
    eager_dispatch: bool = False
    """The engine issues its kernels from eager PyTorch ops, each paying the framework's time before its launch call
    (the accelerator's ``eager_dispatch_us``, :mod:`plait.hardware.eager_dispatch`) on top of ``host_launch_us``:
    torchtitan without ``compile``, llm-foundry (Composer) and ``plait run``. False where the engine's facts do not
    say so: CUDA-graphed layers (:attr:`cuda_graph_layers`, which override it), ``torch.compile``'d blocks and XLA,
    and the Megatron-family engines, whose per-op host time has not been measured (not charged)."""
    p2p_blocking: bool = False
    """Every pipeline transfer blocks the compute stream: the chunk's sends and receives are waited on, the device
    synchronized and the received scatter/gather slice all-gathered over the TP group before the next chunk runs
    (Megatron-LM of 2021, megatron/p2p_communication.py ``_communicate``), so the interleaved schedule pays every
    chunk's hop as 1F1B does (:mod:`plait.cost.p2p`). False: the transfers of the interleaved schedule's steady state
    run beside its other chunks."""
    grad_accumulate_pass: bool = False
    """Each micro-batch's backward adds every weight gradient into the gradient buffer in a separate elementwise
    kernel (Megatron-LM of 2021, :mod:`plait.cost.grad_accumulate`). False: fused into the weight-gradient GEMM
    (Megatron's ``gradient_accumulation_fusion``) or, for other engines, not charged."""
    ddp_bucket_mb: float = 0.0
    """Cap of a gradient bucket of the replica all-reduce (unsharded plans), MB (2**20 bytes): a model whose
    gradients fill fewer buckets than it has layers overlaps that many reductions with the backward pass
    (PyTorch DDP ``bucket_cap_mb``); 0: one reduction per layer (buckets at least a layer's gradients)."""
    collective_backend: BackendChoice = ""
    """The collective library the engine's process groups run on (``nccl``, ``mpi``, ``gloo``, ``grpc``:
    :mod:`plait.engine.backends`); empty: the cluster's own (NCCL on a GPU cluster's nccl-tests figures, gloo on a
    calibrated CPU), which changes nothing."""


DEFAULT = EngineFacts()
