"""Causal ring attention on ``torch.distributed`` point-to-point sends: context parallelism on any backend (gloo).

Legend of shape suffixes: B batch, H heads, S this rank's positions (``2 c``), E head dim, c one chunk (``S / 2``).

Each cp rank holds chunks ``r`` and ``2 cp - 1 - r`` of the sequence (the head-tail load balance of PyTorch's
``_HeadTailLoadBalancer``, torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py), so its two
chunks are in increasing position order and every rank does the same causal work. K/V blocks travel around the ring
(Liu et al. 2023, "Ring Attention with Blockwise Transformers", arXiv:2310.01889, Sec. 3): at step ``i`` rank ``r``
holds the block of rank ``s = r - i`` (mod cp) and, as ``_templated_ring_attention`` in
torch/distributed/tensor/experimental/_context_parallel/_attention.py does,

- ``i = 0``: its own block, causal on the local positions (increasing, so the local causal mask is the global one);
- ``1 <= i <= r``: both its query chunks see all of chunk ``s`` (earlier) and none of chunk ``2 cp - 1 - s`` (later);
- ``i > r``: only its second query chunk ``2 cp - 1 - r`` sees anything, and it sees the whole block.

Block outputs merge by their log-sum-exp (online softmax, Milakov & Gimelshein 2018) in PyTorch's stable form
(``_SDPAMerger._merge_one``): ``out -= sigmoid(lse_b - lse) (out - out_b)``, ``lse -= logsigmoid(lse - lse_b)``.
The backward recomputes each block's probabilities from the final ``lse`` (FlashAttention-2, Dao 2023, Algorithm 2)
while K/V travel the ring once more; the K/V gradient of block ``s`` is summed on the ranks ``s + 1 ... s - 1``
as it travels and handed home by the last, so each rank sends ``cp - 1`` K/V blocks forward and ``2 (cp - 1)``
backward: :func:`plait.cost.context_parallel.cp_sent_bytes` for the ``ring`` exchange.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def head_tail(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """The positions cp rank ``cp_rank`` holds, in order: chunks ``r`` and ``2 cp - 1 - r`` of ``2 cp``."""
    chunk = seq_len // (2 * cp)
    head, tail = cp_rank * chunk, (2 * cp - 1 - cp_rank) * chunk
    return torch.cat([torch.arange(head, head + chunk), torch.arange(tail, tail + chunk)])


class Ring:
    """One cp group's ring: neighbours and the bytes this rank has sent to them."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.size)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.size)
        self.sent_bytes = 0

    def start_pass(self, send_BHSE: torch.Tensor) -> tuple[torch.Tensor, list[dist.Work]]:
        """Send a block to the next rank and receive the previous rank's into a new tensor (both in flight)."""
        send = send_BHSE.contiguous()
        got = torch.empty_like(send)
        self.sent_bytes += send.numel() * send.element_size()
        ops = [dist.P2POp(dist.isend, send, self.next, self.group), dist.P2POp(dist.irecv, got, self.prev, self.group)]
        return got, dist.batch_isend_irecv(ops)

    def attention(self, q_BHSE: torch.Tensor, k_BHSE: torch.Tensor, v_BHSE: torch.Tensor) -> torch.Tensor:
        """Causal attention of this rank's queries over the whole (head-tail sharded) sequence."""
        return _RingAttention.apply(q_BHSE, k_BHSE, v_BHSE, self)  # type: ignore[no-any-return]


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    s = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5  # Vaswani et al. 2017, Eq. 1
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s


def block_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 output and log-sum-exp ``[B, H, S, 1]`` of one block (every query row sees at least one key)."""
    s = _scores(q, k, causal)
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.exp(s - lse) @ v.float(), lse


def block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor,
                   lse: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 (dq, dk, dv) of one block given the merged output and log-sum-exp (FlashAttention-2, Algorithm 2:
    P = exp(S - L), dV = P^T dO, dP = dO V^T, D = rowsum(dO * O), dS = P (dP - D), dQ = dS K, dK = dS^T Q, scaled)."""
    p = torch.exp(_scores(q, k, causal) - lse)
    dout = dout.float()
    dv = p.transpose(-2, -1) @ dout
    ds = p * (dout @ v.float().transpose(-2, -1) - (dout * out).sum(-1, keepdim=True))
    scale = q.shape[-1] ** -0.5
    return (ds @ k.float()) * scale, (ds.transpose(-2, -1) @ q.float()) * scale, dv


def _step_kind(rank: int, i: int) -> str:
    """Which part of the step-``i`` block rank ``rank`` attends to (module docstring)."""
    return "local" if i == 0 else "first_keys" if i <= rank else "second_queries"


def _merge(out: torch.Tensor, lse: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """In place: PyTorch's ``_SDPAMerger._merge_one`` (from zhuzilin/ring-flash-attention PR 34)."""
    out.sub_(torch.sigmoid(lse_b - lse) * (out - out_b))
    lse.sub_(torch.nn.functional.logsigmoid(lse - lse_b))


def ring_forward(ring: Ring, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 output ``[B, H, S, E]`` and log-sum-exp ``[B, H, S, 1]`` over every rank's block."""
    c = q.shape[2] // 2
    kv = torch.cat([k, v], dim=-1)
    out = lse = torch.empty(0)
    for i in range(ring.size):
        pending = ring.start_pass(kv) if i < ring.size - 1 else None  # overlapped with this step's block
        k_i, v_i = kv.split([k.shape[-1], v.shape[-1]], dim=-1)
        kind = _step_kind(ring.rank, i)
        if kind == "local":
            out, lse = block_forward(q, k_i, v_i, causal=True)
        elif kind == "first_keys":
            _merge(out, lse, *block_forward(q, k_i[:, :, :c], v_i[:, :, :c], causal=False))
        else:
            _merge(out[:, :, c:], lse[:, :, c:], *block_forward(q[:, :, c:], k_i, v_i, causal=False))
        if pending is not None:
            kv, works = pending
            for work in works:
                work.wait()
    return out, lse


def ring_forward_full(ring: Ring, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Without a mask (a diffusion transformer's attention): every query sees every rank's block, in any order;
    fp32 output ``[B, H, S, E]`` and log-sum-exp ``[B, H, S, 1]``. Each rank sends ``cp - 1`` K/V blocks."""
    kv = torch.cat([k, v], dim=-1)
    out, lse = block_forward(q, k, v, causal=False)
    for i in range(1, ring.size):
        kv, works = ring.start_pass(kv)
        for work in works:
            work.wait()
        k_i, v_i = kv.split([k.shape[-1], v.shape[-1]], dim=-1)
        _merge(out, lse, *block_forward(q, k_i, v_i, causal=False))
    return out, lse


def ring_backward(ring: Ring, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in the inputs' dtypes; the K/V gradients travel in K's dtype (module docstring)."""
    c, e = q.shape[2] // 2, k.shape[-1]
    kv = torch.cat([k, v], dim=-1)
    dq = torch.zeros_like(out)
    dkv_own = dkv_travelling = None
    for i in range(ring.size):
        pending = ring.start_pass(kv) if i < ring.size - 1 else None
        k_i, v_i = kv.split([e, v.shape[-1]], dim=-1)
        kind = _step_kind(ring.rank, i)
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        if kind == "local":
            dq_b, dk_b, dv_b = block_backward(q, k_i, v_i, out, dout, lse, causal=True)
            dq += dq_b
            dkv = torch.cat([dk_b, dv_b], dim=-1)
        elif kind == "first_keys":
            dq_b, dk_b, dv_b = block_backward(q, k_i[:, :, :c], v_i[:, :, :c], out, dout, lse, causal=False)
            dq += dq_b
            dkv[:, :, :c] = torch.cat([dk_b, dv_b], dim=-1)
        else:
            dq_b, dk_b, dv_b = block_backward(q[:, :, c:], k_i, v_i, out[:, :, c:], dout[:, :, c:], lse[:, :, c:],
                                              causal=False)
            dq[:, :, c:] += dq_b
            dkv = torch.cat([dk_b, dv_b], dim=-1)
        if i == 0:
            dkv_own = dkv
        else:
            if dkv_travelling is not None:
                dkv = dkv + dkv_travelling.float()
            dkv_travelling, grad_works = ring.start_pass(dkv.to(kv.dtype))
            for work in grad_works:
                work.wait()
        if pending is not None:
            kv, works = pending
            for work in works:
                work.wait()
    assert dkv_own is not None
    if dkv_travelling is not None:  # after the last step: the sum of every other rank's share of this rank's block
        dkv_own = dkv_own + dkv_travelling.float()
    dk, dv = dkv_own.split([e, v.shape[-1]], dim=-1)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    """Ring attention forward and its ring backward (the K/V exchange runs twice, the gradients once)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring) -> torch.Tensor:
        with torch.autocast(q.device.type, enabled=False):  # the blocks run in fp32 (merges need it)
            out, lse = ring_forward(ring, q, k, v)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring = ring
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        with torch.autocast(q.device.type, enabled=False):
            return (*ring_backward(ctx.ring, q, k, v, out, lse, dout), None)
