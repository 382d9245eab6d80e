"""Sequence-parallel attention for the DiT runtime (:mod:`plait.workloads.dit.worker`), each an
:data:`~plait.workloads.dit.tiny_model.Attend` over a process group, with its bytes counted:

- :func:`ulysses_attention`: an all-to-all turns the sequence split of Q, K, V into a split of the heads, attention
  runs on the group's whole sequence for ``n / u`` heads, and one more turns the output back (DeepSpeed-Ulysses:
  Jacobs et al., arXiv 2309.14509, Sec. 3.1); exact.
- :func:`ring_attention`: K, V blocks travel round the group, outputs merged by their log-sum-exp (Ring Attention:
  Liu et al., arXiv 2310.01889, Sec. 3; :func:`plait.run.ring_attention.ring_forward_full`); exact up to rounding.
- USP: Ulysses inside, ring across (Fang & Zhao, arXiv 2405.07719, Sec. 3): :func:`ulysses_attention` whose
  ``inner`` attention is :func:`ring_attention` over the ring group.

Tensor legend: ``B`` images, ``S`` this rank's tokens, ``T`` the Ulysses group's tokens, ``n`` heads held,
``D`` head width, ``W`` ranks of the group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from plait.run.counted import Counted
from plait.run.ring_attention import Ring, ring_forward_full
from plait.workloads.dit.tiny_model import Attend, local_attention


def ulysses_attention(counter: Counted, group: dist.ProcessGroup | None = None,
                      inner: Attend = local_attention) -> Attend:
    world = dist.get_world_size(group)

    def to_heads(x_BSnD: torch.Tensor) -> torch.Tensor:
        b, s, n, d = x_BSnD.shape
        send = x_BSnD.reshape(b, s, world, n // world, d).permute(2, 0, 1, 3, 4).contiguous()
        got = torch.empty_like(send)
        counter.all_to_all(got, send, group=group)  # got[r]: rank r's tokens for this rank's heads
        return got.permute(1, 0, 2, 3, 4).reshape(b, world * s, n // world, d)

    def to_tokens(o_BTnD: torch.Tensor) -> torch.Tensor:
        b, t, n, d = o_BTnD.shape
        send = o_BTnD.reshape(b, world, t // world, n, d).permute(1, 0, 2, 3, 4).contiguous()
        got = torch.empty_like(send)
        counter.all_to_all(got, send, group=group)  # got[r]: this rank's tokens, rank r's heads
        return got.permute(1, 2, 0, 3, 4).reshape(b, t // world, world * n, d)

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return to_tokens(inner(layer, to_heads(q), to_heads(k), to_heads(v)))

    return attend


def ring_attention(ring: Ring) -> Attend:
    """Attention of this rank's queries over every rank's tokens of ``ring``'s group (bytes in ``ring.sent_bytes``)."""
    def attend(layer: int, q_BSnD: torch.Tensor, k_BSnD: torch.Tensor, v_BSnD: torch.Tensor) -> torch.Tensor:
        out, _ = ring_forward_full(ring, *(x.transpose(1, 2) for x in (q_BSnD, k_BSnD, v_BSnD)))
        return out.transpose(1, 2).to(q_BSnD.dtype)

    return attend
