"""Sequence-parallel DiT inference on torch.distributed: the image's tokens split over the ranks and
denoised with a small DiT (:mod:`plait.workloads.dit.tiny_model`), attention made whole by one of

- ``ulysses``: an all-to-all turns the sequence split of Q, K, V into a split of the heads, attention runs on the
  whole sequence for ``N / W`` heads, and one more turns the output back (DeepSpeed-Ulysses: Jacobs et al.,
  arXiv 2309.14509, Sec. 3.1); exact.
- ``distrifusion``: each rank attends with its own fresh K, V and the other ranks' K, V of the previous step,
  refreshed by an all-gather started after the layer and waited for one step later (DistriFusion: Li et al.,
  CVPR 2024, Sec. 4.2); the first ``--warmup`` steps gather fresh K, V before attending (exact).

Every all-to-all and all-gather goes through torch.distributed and its bytes to peers are counted. ``--ranks 1``
is the single-process reference. Rank 0 writes the whole denoised latent and each rank's counted bytes.

Run: ``python -m torch.distributed.run --nproc-per-node 2 -m plait.workloads.dit.worker --sp ulysses --out run.json``.

Tensor legend: ``B`` images, ``S`` this rank's tokens, ``T`` all tokens, ``N`` heads, ``n`` heads per rank,
``D`` head width, ``P`` patch values, ``W`` ranks.
"""

from __future__ import annotations


import torch
import torch.distributed as dist

from plait.run.counted import ALL_GATHER, Counted
from plait.run.config import read_config
from plait.workloads.dit.tiny_model import TinyDiT, denoise, local_attention
from plait.run.gloo_job import run_job
from plait.run.workload_configs import DitConfig


def ulysses_attention(counter: Counted):  # type: ignore[no-untyped-def]
    world = dist.get_world_size()

    def to_heads(x_BSND: torch.Tensor) -> torch.Tensor:
        b, s, n, d = x_BSND.shape
        send = x_BSND.reshape(b, s, world, n // world, d).permute(2, 0, 1, 3, 4).contiguous()
        got = torch.empty_like(send)
        counter.all_to_all(got, send)  # got[r]: rank r's tokens for this rank's heads
        return got.permute(1, 0, 2, 3, 4).reshape(b, world * s, n // world, d)

    def to_tokens(o_BTnD: torch.Tensor) -> torch.Tensor:
        b, t, n, d = o_BTnD.shape
        send = o_BTnD.reshape(b, world, t // world, n, d).permute(1, 0, 2, 3, 4).contiguous()
        got = torch.empty_like(send)
        counter.all_to_all(got, send)  # got[r]: this rank's tokens, rank r's heads
        return got.permute(1, 2, 0, 3, 4).reshape(b, t // world, world * n, d)

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return to_tokens(local_attention(layer, to_heads(q), to_heads(k), to_heads(v)))

    return attend


class StaleKV:
    """DistriFusion's attention: fresh K, V of this rank's tokens, the others' from the previous step. With
    ``check``, every stale attention is also computed exactly (from K, V gathered fresh, not counted) and the
    difference recorded beside :func:`stale_attention_bound`."""

    def __init__(self, counter: Counted, layers: int, steps: int, warmup: int, check: bool = False) -> None:
        if warmup < 1:
            raise ValueError(f"warmup={warmup} must be >= 1: the first step has no earlier K, V to reuse")
        self.counter, self.steps, self.warmup, self.step, self.check = counter, steps, warmup, 0, check
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
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
            ALL_GATHER(exact_parts, fresh)
            exact = self._arrange(exact_parts, fresh)
            reference = local_attention(layer, q, exact[0], exact[1])
            bound = stale_attention_bound(q, exact[0], exact[1], whole[0], whole[1])
            self.errors.append((float((out - reference).abs().max()), bound))
        return out

    def _gather(self, fresh: torch.Tensor, wait: bool):  # type: ignore[no-untyped-def]
        """Every rank's K, V into one buffer, and the pending work (none once waited for)."""
        parts = torch.empty((self.world * fresh.shape[0], *fresh.shape[1:]), dtype=fresh.dtype)
        work = self.counter.all_gather(parts, fresh, async_op=not wait)
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


def run(args: DitConfig) -> dict[str, object]:
    tokens = args.side * args.side
    values = args.patch * args.patch * args.channels
    model = TinyDiT(args.hidden, args.heads, args.layers, values, tokens, seed=args.seed).eval()
    gen = torch.Generator().manual_seed(args.seed + 1)
    noise_BTP = torch.randn(args.batch, tokens, values, generator=gen)
    labels_B = torch.arange(args.batch) % 10
    if args.ranks == 1:
        return {"latent": denoise(model, noise_BTP, labels_B, args.steps, slice(None)).tolist()}
    world, rank = dist.get_world_size(), dist.get_rank()
    share = tokens // world
    mine = slice(rank * share, (rank + 1) * share)
    counter = Counted()
    if args.sp == "ulysses":
        out = denoise(model, noise_BTP[:, mine], labels_B, args.steps, mine, ulysses_attention(counter))
    else:
        stale = StaleKV(counter, args.layers, args.steps, args.warmup, args.check)
        out = denoise(model, noise_BTP[:, mine], labels_B, args.steps, mine, stale.attend, stale.on_step)
        errors: list[list[tuple[float, float]]] = [[] for _ in range(world)]
        dist.all_gather_object(errors, stale.errors)
    whole = torch.empty(world * out.shape[0], *out.shape[1:]).view(world, *out.shape)
    ALL_GATHER(whole.view(-1, *out.shape[1:]), out.contiguous())
    sent: list[int] = [0] * world
    dist.all_gather_object(sent, counter.sent)
    result: dict[str, object] = {"latent": whole.permute(1, 0, 2, 3).flatten(1, 2).tolist(), "bytes_sent": sent}
    if args.sp == "distrifusion":
        result["attention_errors"] = errors
    return result


def main(argv: list[str] | None = None) -> int:
    args = read_config(DitConfig, argv, prog="plait.workloads.dit.worker", description=__doc__)
    return run_job(args.out, args.ranks == 1, lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
