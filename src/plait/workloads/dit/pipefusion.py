"""PipeFusion on torch.distributed (Wang et al., arXiv 2405.14430, Sec. 4; xDiT's ``_async_pipeline`` in
xfuser/model_executor/pipelines/pipeline_pixart_alpha.py): the blocks in ``p`` stages of consecutive layers, the
image in ``M`` patches streamed through them. Each stage keeps, per layer, a K, V buffer of the whole image: a
patch writes its fresh K, V into it and attends over all of it, so patches not yet computed this step are seen
one step stale (displaced patch parallelism). The first ``warmup`` steps send the whole image as one patch
(exact; xDiT's synchronous warm-up, ``--warmup_steps``). The last stage applies guidance and the Euler step and
sends each updated patch latent back to the first stage, except in the last step. With CFG parallel (a ``cfg``
group of 2) each pipeline runs one pass and the last stages all-gather their velocities. With Ulysses (a group of
``u``, xDiT's PipeFusion x USP hybrid) each patch's tokens are split over the group, rank ``j`` holding the ``j``-th
``1 / u`` of every patch (in the warm-up too, so a rank's latent tokens never change hands), and an all-to-all
turns them into the whole patch for ``N / u`` heads, which attend over a buffer of those heads. With ring
attention across (a group of ``r``; USP: Ulysses inside, ring across) each ring rank keeps the buffer of its
``1 / r`` of every patch and, for each patch, sends that whole buffer round the ring (xDiT's
``xdit_ring_flash_attn_forward`` updates the layer's K, V cache and rings it), so a stale step sends ``M`` times
the ring bytes of a synchronous one.

With ``check``, each stale attention is compared, at the end of its step, with attention over the step's final
K, V buffer, and :func:`plait.workloads.dit.stale_kv.stale_attention_bound` recorded beside it.

Tensor legend: ``B`` images, ``b`` passes (``2 B`` with batched guidance), ``T`` all tokens, ``S`` a patch's
tokens, ``H`` hidden, ``N`` heads, ``D`` head width, ``P`` patch values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from plait.run.counted import Counted
from plait.run.ring_attention import Ring
from plait.workloads.dit.sp_attention import ring_attention, ulysses_attention
from plait.workloads.dit.stale_kv import stale_attention_bound
from plait.workloads.dit.tiny_model import TinyDiT, guide, local_attention, step_size, timestep


@dataclass
class Stage:
    """One rank's place: its pipeline's global ranks in stage order, its CFG group (or None), its pass."""

    ranks: list[int]
    cfg_group: dist.ProcessGroup | None
    cfg_rank: int
    guidance: float
    check: bool = False
    ulysses_group: dist.ProcessGroup | None = None
    ring: Ring | None = None
    errors: list[tuple[float, float]] = field(default_factory=list)

    @property
    def index(self) -> int:
        return self.ranks.index(dist.get_rank())

    @property
    def last(self) -> bool:
        return self.index == len(self.ranks) - 1

    @property
    def ulysses(self) -> tuple[int, int]:
        """This rank's place in its Ulysses group and the group's size."""
        group = self.ulysses_group
        return (dist.get_rank(group), dist.get_world_size(group)) if group is not None else (0, 1)

    def held(self, m: int, pieces: int, patches: int, tokens: int, ulysses_rank: int | None = None) -> torch.Tensor:
        """Positions of piece ``m`` this rank (or Ulysses rank ``ulysses_rank`` of its group) holds."""
        j, u = self.ulysses
        ring_rank, r = (self.ring.rank, self.ring.size) if self.ring is not None else (0, 1)
        return owned(m, pieces, patches, tokens, u * r, ring_rank * u + (j if ulysses_rank is None else ulysses_rank))

    def gathered(self, m: int, pieces: int, patches: int, tokens: int) -> torch.Tensor:
        """Positions of piece ``m`` this rank attends for after Ulysses' all-to-all: its group's, in rank order."""
        return torch.cat([self.held(m, pieces, patches, tokens, k) for k in range(self.ulysses[1])])


def pipefusion_denoise(model: TinyDiT, x_BTP: torch.Tensor, y_B: torch.Tensor, steps: int, warmup: int,
                       patches: int, stage: Stage, counter: Counted) -> torch.Tensor | None:
    """The denoised latent on the last stage (None elsewhere)."""
    p, s = len(stage.ranks), stage.index
    per_stage = len(model.blocks) // p
    layers = range(s * per_stage, (s + 1) * per_stage)
    tokens = x_BTP.shape[1]
    ring_block = stage.gathered(0, 1, patches, tokens)  # this ring rank's K, V positions, every patch
    batched = stage.guidance and stage.cfg_group is None  # both passes in one batch on this pipeline
    null_B = torch.full_like(y_B, model.null_class)
    labels = torch.cat([y_B, null_B]) if batched else y_B if stage.cfg_rank == 0 else null_B
    buffers: dict[int, torch.Tensor] = {}  # layer -> K, V of the whole image: 2 b T N D
    pending: list[dist.Work] = []
    with torch.no_grad():
        for i in range(steps):
            t_b = timestep(steps, i, labels.shape[0])
            c_bH = model.condition(t_b, labels)
            previous, pieces = (1 if i - 1 < warmup else patches), (1 if i < warmup else patches)
            used: list[tuple[int, torch.Tensor, torch.Tensor]] = []
            for m in range(pieces):
                where = stage.held(m, pieces, patches, tokens)
                if s == 0:
                    if i > 0 and p > 1 and (m == 0 or pieces == previous):  # in the partition it was sent in
                        _receive_latent(x_BTP, where if pieces == previous else stage.held(0, 1, patches, tokens),
                                        stage.ranks[-1])
                    x_bSP = torch.cat([x_BTP[:, where]] * 2) if batched else x_BTP[:, where]
                    h_bSH = model.tokens(x_bSP, where)  # type: ignore[arg-type]
                else:
                    h_bSH = torch.empty(labels.shape[0], len(where), model.pos_SH.shape[1])
                    dist.recv(h_bSH, stage.ranks[s - 1])
                group = stage.gathered(m, pieces, patches, tokens)
                for layer in layers:  # group: this rank's positions after the all-to-all
                    attend = _buffered(buffers, layer, group, tokens, used, stage.check and i >= warmup,
                                       stage.ring, ring_block)
                    if stage.ulysses_group is not None:
                        attend = ulysses_attention(counter, stage.ulysses_group, attend)
                    h_bSH = model.blocks[layer](h_bSH, c_bH, layer, attend)
                if not stage.last:
                    pending.append(counter.isend(h_bSH, stage.ranks[s + 1]))
                    continue
                v_BSP = _velocity(model.out(h_bSH, c_bH), stage, batched, counter)
                x_BTP[:, where] = x_BTP[:, where] + step_size(steps, i) * v_BSP
                if p > 1 and i < steps - 1:
                    pending.append(counter.isend(x_BTP[:, where].clone(), stage.ranks[0]))
            stage.errors += [_check(q, kv, buffers[layer]) for layer, q, kv in used]
    for work in pending:
        work.wait()
    return x_BTP if stage.last else None


def _receive_latent(x_BTP: torch.Tensor, where: torch.Tensor, last: int) -> None:
    got = torch.empty_like(x_BTP[:, where])
    dist.recv(got, last)
    x_BTP[:, where] = got


def owned(m: int, pieces: int, patches: int, tokens: int, u: int, j: int) -> torch.Tensor:
    """Token positions of piece ``m`` of ``pieces`` (1: the whole image, else the ``patches``) that rank ``j`` of a
    sequence-parallel group of ``u`` holds: the ``j``-th ``1 / u`` of each patch in the piece."""
    per_piece, share = patches // pieces, tokens // patches // u
    starts = [(m * per_piece + k) * tokens // patches + j * share for k in range(per_piece)]
    return torch.cat([torch.arange(a, a + share) for a in starts])


def _buffered(buffers: dict[int, torch.Tensor], layer: int, where: torch.Tensor, tokens: int,
              used: list[tuple[int, torch.Tensor, torch.Tensor]], check: bool, ring: Ring | None,
              ring_block: torch.Tensor):  # type: ignore[no-untyped-def]
    """Attention of a patch's queries over the layer's buffer, its own K, V written in fresh first; with a ring,
    over every ring rank's buffer (its positions ``ring_block``), passed round."""
    def attend(_: int, q_bSND: torch.Tensor, k_bSND: torch.Tensor, v_bSND: torch.Tensor) -> torch.Tensor:
        if layer not in buffers:
            buffers[layer] = torch.zeros(2, q_bSND.shape[0], tokens, *q_bSND.shape[2:])
        kv = buffers[layer]
        kv[0, :, where], kv[1, :, where] = k_bSND, v_bSND
        if ring is not None:
            mine = kv[:, :, ring_block]
            return ring_attention(ring)(layer, q_bSND, mine[0], mine[1])
        if check:
            used.append((layer, q_bSND.clone(), kv.clone()))
        return local_attention(layer, q_bSND, kv[0], kv[1])
    return attend


def _check(q_bSND: torch.Tensor, used_kv: torch.Tensor, final_kv: torch.Tensor) -> tuple[float, float]:
    """The attention's difference from attention over the step's final K, V, and its bound."""
    out = local_attention(0, q_bSND, used_kv[0], used_kv[1])
    reference = local_attention(0, q_bSND, final_kv[0], final_kv[1])
    return float((out - reference).abs().max()), stale_attention_bound(q_bSND, final_kv[0], final_kv[1],
                                                                       used_kv[0], used_kv[1])


def _velocity(v_bSP: torch.Tensor, stage: Stage, batched: bool, counter: Counted) -> torch.Tensor:
    """The guided velocity: from the batched pair, or gathered from the other pass's pipeline."""
    if not stage.guidance:
        return v_bSP
    if batched:
        return guide(*v_bSP.chunk(2), stage.guidance)
    both = torch.empty(2 * v_bSP.shape[0], *v_bSP.shape[1:])
    counter.all_gather(both, v_bSP.contiguous(), group=stage.cfg_group)
    return guide(*both.chunk(2), stage.guidance)
