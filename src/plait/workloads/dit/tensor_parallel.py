"""Megatron tensor parallelism of a DiT block (Shoeybi et al., arXiv 1909.08053, Sec. 3, Fig. 3): Q, K, V and
the MLP's first layer split by columns (heads, hidden units), the attention output and the MLP's second layer by
rows, each followed by an all-reduce of the block's ``S x H`` output. The adaLN modulation (``H x 6H``, a third of
a DiT block's weights) is split by columns too, each rank computing ``1 / t`` of each of its six vectors, which
one all-gather of the per-image conditioning (``6 H`` numbers an image, not per token) makes whole, so every
weight is sharded ``1 / t`` as the cost model counts. Cut from the single-process block's own weights, so the
split model computes the same function.

Tensor legend: ``B`` images, ``S`` tokens, ``H`` hidden, ``n`` heads of this rank, ``D`` head width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as fn
from torch import nn

from plait.workloads.dit.tiny_model import Attend, Block

Reduce = Callable[[torch.Tensor], torch.Tensor]
"""Sums a tensor over the tensor-parallel group."""
Gather = Callable[[torch.Tensor], torch.Tensor]
"""Every rank's tensor of the tensor-parallel group, stacked in rank order on a new first dimension."""


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


class TpBlock(nn.Module):
    """Rank ``rank`` of ``world``'s share of ``block``."""

    def __init__(self, block: Block, rank: int, world: int, reduce: Reduce, gather: Gather) -> None:
        super().__init__()
        hidden = block.proj.weight.shape[0]
        heads, d = block.heads, hidden // block.heads
        self.heads, self.reduce = heads // world, reduce
        mine = slice(rank * self.heads, (rank + 1) * self.heads)
        qkv_w = block.qkv.weight.view(3, heads, d, hidden)[:, mine].reshape(-1, hidden)
        qkv_b = block.qkv.bias.view(3, heads, d)[:, mine].reshape(-1)
        self.qkv = _linear(qkv_w, qkv_b)
        self.proj = _linear(block.proj.weight.view(hidden, heads, d)[:, mine].reshape(hidden, -1), None)
        self.proj_bias = block.proj.bias.detach().clone()  # added once, after the sum
        width = block.fc1.weight.shape[0] // world
        units = slice(rank * width, (rank + 1) * width)
        self.fc1 = _linear(block.fc1.weight[units], block.fc1.bias[units])
        self.fc2 = _linear(block.fc2.weight[:, units], None)
        self.fc2_bias = block.fc2.bias.detach().clone()
        part = slice(rank * hidden // world, (rank + 1) * hidden // world)
        self.modulation = _linear(block.modulation.weight.view(6, hidden, hidden)[:, part].reshape(-1, hidden),
                                  block.modulation.bias.view(6, hidden)[:, part].reshape(-1))
        self.norm1, self.norm2, self.gather = block.norm1, block.norm2, gather

    def forward(self, x_BSH: torch.Tensor, c_BH: torch.Tensor, layer: int, attend: Attend) -> torch.Tensor:
        mine_B6h = self.modulation(fn.silu(c_BH)).view(c_BH.shape[0], 6, -1)
        whole_B6H = self.gather(mine_B6h.contiguous()).permute(1, 2, 0, 3).flatten(2)  # ranks' parts side by side
        shift1, scale1, gate1, shift2, scale2, gate2 = whole_B6H.unsqueeze(1).unbind(dim=2)
        h_BSH = self.norm1(x_BSH) * (1 + scale1) + shift1
        b, s, _ = h_BSH.shape
        q, k, v = self.qkv(h_BSH).view(b, s, 3, self.heads, -1).unbind(dim=2)
        o_BSH = self.reduce(self.proj(attend(layer, q, k, v).reshape(b, s, -1))) + self.proj_bias
        x_BSH = x_BSH + gate1 * o_BSH
        h_BSH = self.norm2(x_BSH) * (1 + scale2) + shift2
        m_BSH = self.reduce(self.fc2(fn.gelu(self.fc1(h_BSH), approximate="tanh"))) + self.fc2_bias
        return x_BSH + gate2 * m_BSH
