"""Context parallelism (``plan.cp > 1``): PyTorch's ``context_parallel`` on CUDA, plait's own elsewhere.

plait's own (on any backend, gloo included, and for ``cp_attention = "ulysses"`` or ``"lss"`` on CUDA too): the
sequence is sharded in place (:func:`positions`) and every attention layer's core becomes the ring of
:mod:`plait.run.ring_attention`, the all-to-all of :mod:`plait.run.ulysses` or the fused K/V all-gather of
:mod:`plait.run.lss` over the cp group. PyTorch's, below:

Legend of shape suffixes: B batch, S sequence, E/2 half the head dim (rope tables).

Inside :func:`train_context` each cp rank keeps ``2 * (S / (2 cp))`` positions of the sequence, the
head-tail load balance of ``_HeadTailLoadBalancer`` (chunks ``r`` and ``2 cp - 1 - r``, so every rank does
the same causal work): the inputs, the targets and the rope tables are sharded in place, and the model's
``F.scaled_dot_product_attention(..., is_causal=True)`` is patched into ring attention whose K/V exchange
is one all-gather per pass (``set_rotate_method("allgather")``: plait/cost/context_parallel.py's
``cp_kv_exchange="allgather"``), with SDPA held to the flash, efficient and cuDNN kernels that the ring
handlers implement.
References: torch/distributed/tensor/experimental/_context_parallel/_attention.py (``context_parallel``,
``_templated_ring_attention``), Liu et al. 2023 ("Ring Attention"), and torchtitan's use before 0.3.0
(``create_context_parallel_ctx`` and ``get_train_context``, torchtitan/distributed/utils.py; 0.3.0 shards
with ``prepare_context_parallel_input``, torchtitan/distributed/context_parallel/api.py).

Gradients: each cp rank's loss is the mean over its own tokens, all ranks hold the same number, so the
global mean loss is the mean over dp x cp ranks and its gradient the average of theirs. Data parallelism
therefore reduces over dp_shard and cp flattened into one axis, as torchtitan's FSDP mesh does
(``dp_shard_cp``; ``fsdp`` in 0.3.0's ParallelDims), with dp_replicate as HSDP's outer axis.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.lss import Lss
from plait.run.mesh import Mesh
from plait.run.model import Attention
from plait.run.ring_attention import head_tail

ROPE_BUFFERS = ("rope_cos", "rope_sin")  # plait/run/model.py Transformer buffers, [S, E/2]
# PyTorch SDPA's flash kernel takes head_dim <= 256, a multiple of 8 (sdp_utils.cpp check_head_dim_size_flash)


def check_context_parallel(plan: Plan, on_gpu: bool) -> None:
    """Refuse a cp plan when this GPU has none of the SDPA kernels ``context_parallel`` implements (the static
    limits — CUDA only, head dims, learned positions, DDP with tp/pp — are in the capability table)."""
    if plan.cp == 1 or not on_gpu or plan.cp_attention != "ring":
        return
    backends = torch.backends.cuda
    if not (backends.flash_sdp_enabled() or backends.mem_efficient_sdp_enabled() or backends.cudnn_sdp_enabled()):
        raise ConfigError(f"cp={plan.cp}: context_parallel runs on SDPA's flash, efficient or cuDNN kernels, "
                          "and all three are disabled")


def fsdp_mesh(mesh: Mesh) -> DeviceMesh:
    """The FSDP2 mesh with cp folded into the shard axis: ``dp_shard_cp``, or (dp_replicate, dp_shard_cp) for HSDP.

    Group creation is collective: every rank calls this, in the same order (once per model part)."""
    plan = mesh.plan
    if plan.dp_replicate == 1:
        return mesh.mesh["dp_shard", "cp"]._flatten("dp_shard_cp")  # the root mesh caches it by name
    replicas = mesh.mesh["dp_replicate", "dp_shard", "cp"]._flatten("dp_cp")  # cp is the fastest of the three
    return replicas._unflatten(0, (plan.dp_replicate, plan.dp_shard * plan.cp), ("dp_replicate", "dp_shard_cp"))


def replica_group(mesh: Mesh) -> dist.ProcessGroup:
    """DDP's group with cp folded in: every rank holding the same (pp, tp) piece of the model."""
    return mesh.mesh["dp_replicate", "dp_shard", "cp"]._flatten("dp_cp").get_group()


def cp_buffers(parts: Sequence[nn.Module], inputs_BS: torch.Tensor,
               targets_BS: torch.Tensor) -> tuple[list[torch.Tensor], list[int]]:
    """What ``context_parallel`` shards and along which dim: the batch (dim 1) and every part's rope tables (dim 0)."""
    buffers, seq_dims = [inputs_BS, targets_BS], [1, 1]
    for part in parts:
        for name, buffer in part.named_buffers():
            if name.split(".")[-1] in ROPE_BUFFERS and not any(buffer is b for b in buffers):
                buffers.append(buffer)
                seq_dims.append(0)
    for buffer in buffers:  # sharded by resize_ + copy_: a view would write into the tensor it views
        assert buffer._base is None and buffer.is_contiguous(), "cp buffers must own their storage"
    return buffers, seq_dims


def uses_pytorch(plan: Plan, device: str) -> bool:
    """Whether the step runs PyTorch's ``context_parallel`` (CUDA ring attention, the all-gather K/V exchange):
    on CUDA for ``cp_attention = "ring"``; elsewhere, and for Ulysses and LSS, plait's attention on torch.distributed
    primitives (:mod:`plait.run.ring_attention`, :mod:`plait.run.ulysses`, :mod:`plait.run.lss`)."""
    return plan.cp > 1 and device == "cuda" and plan.cp_attention == "ring"


def positions(plan: Plan, cp_rank: int) -> torch.Tensor:
    """The sequence positions cp rank ``cp_rank`` holds, in order: chunks ``r`` and ``2 cp - 1 - r`` of ``2 cp``
    for the ring and LSS (PyTorch's ``_HeadTailLoadBalancer``), the ``r``-th contiguous slice for Ulysses."""
    seq, cp = plan.seq_len, plan.cp
    if plan.cp_attention == "ulysses":
        return torch.arange(cp_rank * seq // cp, (cp_rank + 1) * seq // cp)
    return head_tail(seq, cp, cp_rank)


def _keep_in_place(buffer: torch.Tensor, dim: int, rows: torch.Tensor) -> None:
    kept = buffer.index_select(dim, rows.to(buffer.device))
    buffer.resize_(kept.shape)
    buffer.copy_(kept)


@contextlib.contextmanager
def _primitives_context(parts: Sequence[nn.Module], mesh: Mesh, inputs_BS: torch.Tensor,
                        targets_BS: torch.Tensor) -> Iterator[None]:
    """Shard the sequence over the cp ranks in place and make every attention layer's core the ring or the
    all-to-all over the cp group; the rope tables and the cores are restored afterwards."""
    buffers, seq_dims = cp_buffers(parts, inputs_BS, targets_BS)
    rows = positions(mesh.plan, mesh.coordinate("cp"))
    rope = [(b, b.clone()) for b in buffers[2:]]
    for buffer, dim in zip(buffers, seq_dims):
        _keep_in_place(buffer, dim, rows)
    layers = [m for part in parts for m in part.modules() if isinstance(m, Attention)]
    core = mesh.cp_attention
    for layer in layers:  # LSS sends one copy of each K/V head (plait.run.lss); the ring and Ulysses all copies
        layer.context_core = functools.partial(core.attention, repeats=layer.repeats) if isinstance(core, Lss) \
            else core.attention
    try:
        yield
    finally:
        for layer in layers:
            layer.context_core = None
        for buffer, whole in rope:
            buffer.resize_(whole.shape)
            buffer.copy_(whole)


def cp_sent_bytes(mesh: Mesh) -> int | None:
    """Bytes this rank has sent its cp peers in attention so far (plait's own CP attention; ``None`` otherwise)."""
    if mesh.plan.cp == 1 or uses_pytorch(mesh.plan, mesh.mesh.device_type):
        return None
    return mesh.cp_attention.sent_bytes


@contextlib.contextmanager
def train_context(parts: Sequence[nn.Module], mesh: Mesh, inputs_BS: torch.Tensor,
                  targets_BS: torch.Tensor) -> Iterator[None]:
    """The forward and backward of one step run inside this (nothing when cp = 1): on CUDA with the ring,
    ``context_parallel`` over the cp axis with the all-gather K/V exchange; otherwise plait's ring or all-to-all
    attention on torch.distributed primitives. Inputs and targets stay sharded afterwards; the rope tables are
    restored."""
    if mesh.plan.cp == 1:
        yield
        return
    if not uses_pytorch(mesh.plan, mesh.mesh.device_type):
        with _primitives_context(parts, mesh, inputs_BS, targets_BS):
            yield
        return
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    from torch.nn.attention import SDPBackend, sdpa_kernel

    set_rotate_method("allgather")
    buffers, seq_dims = cp_buffers(parts, inputs_BS, targets_BS)
    ring_kernels = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    with sdpa_kernel(ring_kernels), context_parallel(mesh.sub("cp"), buffers=buffers, buffer_seq_dims=seq_dims,
                                                     no_restore_buffers={inputs_BS, targets_BS}):
        yield


def mean_over_cp(value: float, mesh: Mesh) -> float:
    """Average a scalar (this rank's mean loss over its tokens) over the cp ranks, which hold equal token counts."""
    if mesh.plan.cp == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=mesh.mesh.device_type)
    dist.all_reduce(tensor, group=mesh.sub("cp").get_group())
    return float(tensor.item()) / mesh.plan.cp


def average_over_cp(params: Sequence[torch.Tensor], mesh: Mesh) -> None:
    """Under a ``dp_sync`` method, average the gradients over the cp ranks of this replica (one flat all-reduce),
    which hold one model copy between them, before the method runs across replicas over the dp group
    (:attr:`plait.run.mesh.Mesh.replicas`). With the all-reduce, DDP/FSDP reduce over dp x cp at once instead."""
    grads = [p.grad for p in params if p.grad is not None]
    if mesh.plan.cp == 1 or mesh.plan.dp_sync.is_allreduce or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=mesh.sub("cp").get_group())
    flat.div_(mesh.plan.cp)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
