"""DistriFusion's stale K, V (Li et al., CVPR 2024, Sec. 4.2): each rank attends with its own fresh K, V and the
other ranks' K, V of the previous step, refreshed by an all-gather started after the layer and waited for one step
later; the first ``warmup`` steps gather fresh K, V before attending (exact). And the bound on what a stale K, V
can change in one attention (:func:`stale_attention_bound`), which PipeFusion's check uses too.

Tensor legend: ``B`` images, ``S`` this rank's tokens, ``T`` all tokens, ``N`` heads, ``D`` head width.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from plait.run.counted import ALL_GATHER, Counted
from plait.workloads.dit.tiny_model import local_attention


class StaleKV:
    """DistriFusion's attention over ``group``: fresh K, V of this rank's tokens, the others' from the previous
    step. With ``check``, every stale attention is also computed exactly (from K, V gathered fresh, not counted)
    and the difference recorded beside :func:`stale_attention_bound`."""

    def __init__(self, counter: Counted, layers: int, steps: int, warmup: int, check: bool = False,
                 group: dist.ProcessGroup | None = None) -> None:
        if warmup < 1:
            raise ValueError(f"warmup={warmup} must be >= 1: the first step has no earlier K, V to reuse")
        self.counter, self.steps, self.warmup, self.step, self.check = counter, steps, warmup, 0, check
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.pending: list[tuple[torch.Tensor, object] | None] = [None] * layers
        self.errors: list[tuple[float, float]] = []

    def on_step(self, step: int) -> None:
        self.step = step

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        fresh = torch.stack([k, v]).contiguous()  # 2 B S N D
        if self.step < self.warmup:
            parts, _ = self._gather(fresh, wait=True)
            self.pending[layer] = (parts, None)  # also the next step's stale K, V
            whole = self._arrange(parts, fresh)
            return local_attention(layer, q, whole[0], whole[1])
        parts, work = self.pending[layer]  # type: ignore[misc]
        if work is not None:
            work.wait()  # type: ignore[attr-defined]
        whole = self._arrange(parts, fresh).clone()
        s = fresh.shape[2]
        whole[:, :, self.rank * s:(self.rank + 1) * s] = fresh  # this rank's own K, V are always fresh
        if self.step + 1 < self.steps:
            self.pending[layer] = self._gather(fresh, wait=False)
        out = local_attention(layer, q, whole[0], whole[1])
        if self.check:
            exact_parts = torch.empty((self.world * fresh.shape[0], *fresh.shape[1:]))
            ALL_GATHER(exact_parts, fresh, group=self.group)
            exact = self._arrange(exact_parts, fresh)
            reference = local_attention(layer, q, exact[0], exact[1])
            bound = stale_attention_bound(q, exact[0], exact[1], whole[0], whole[1])
            self.errors.append((float((out - reference).abs().max()), bound))
        return out

    def _gather(self, fresh: torch.Tensor, wait: bool):  # type: ignore[no-untyped-def]
        """Every rank's K, V into one buffer, and the pending work (none once waited for)."""
        parts = torch.empty((self.world * fresh.shape[0], *fresh.shape[1:]), dtype=fresh.dtype)
        work = self.counter.all_gather(parts, fresh, async_op=not wait, group=self.group)
        return parts, (None if wait else work)

    def _arrange(self, parts: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """Ranks' K, V side by side in token order: 2 B T N D."""
        return parts.view(self.world, *fresh.shape).permute(1, 2, 0, 3, 4, 5).flatten(2, 3)


def stale_attention_bound(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_stale: torch.Tensor,
                          v_stale: torch.Tensor) -> float:
    """An upper bound on ``max |attention(q, K', V') - attention(q, K, V)|`` over every query and channel.

    For one query row, ``a = softmax(q K^T / sqrt(d))`` and ``a'`` with ``K'``:
    ``a' V' - a V = a' (V' - V) + (a' - a) V``. The first term is a convex combination of the rows of ``V' - V``,
    at most ``max_j |V'_j - V_j|_inf``. Softmax's Jacobian ``diag(a) - a a^T`` maps ``h`` to a vector of l1 norm
    ``sum_i a_i |h_i - a.h| <= max h - min h <= 2 |h|_inf``, so ``|a' - a|_1 <= 2 |x' - x|_inf`` with
    ``x_j = q.K_j / sqrt(d)``, and by Cauchy-Schwarz ``|x'_j - x_j| <= |q|_2 |K'_j - K_j|_2 / sqrt(d)``; the second
    term is at most ``|a' - a|_1 max_j |V_j|_inf``. Taken here per image and head, maximised over queries."""
    d = q.shape[-1]
    dv = (v_stale - v).abs().amax(dim=(1, 3))  # B N: max over keys and channels
    dk = (k_stale - k).norm(dim=-1).amax(dim=1)  # B N
    qn = q.norm(dim=-1).amax(dim=1)  # B N
    vmax = v.abs().amax(dim=(1, 3))  # B N
    return float((dv + 2 * qn * dk / d**0.5 * vmax).max())
