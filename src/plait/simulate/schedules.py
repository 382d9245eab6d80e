"""Pipeline schedules as per-rank operation orders.

An operation is (kind, micro-batch, chunk): ``F`` forward, ``B`` backward (input and
weight gradients), or for zero-bubble schedules ``B`` input gradient and ``W`` weight
gradient. Chunk ``c`` of rank ``r`` is global stage ``r + c * p`` (looped placement).

- GPipe: all forwards, then all backwards (Huang et al. 2019).
- 1F1B: ``p - r - 1`` warm-up forwards, then one-forward-one-backward, then the remaining
  backwards (PipeDream-Flush; Narayanan et al. 2021, Sec. 2.2.1).
- Interleaved 1F1B: Megatron-LM's order over ``v`` chunks in groups of ``p`` micro-batches,
  with ``(p - r - 1) * 2 + (v - 1) * p`` warm-up forwards (Narayanan et al. 2021, Sec. 2.2.2).
- ZB-H1: 1F1B with the backward split into B (input gradient) and W (weight gradient);
  rank ``r`` runs its first ``r`` Ws late — after B ``r``, each B is followed by the oldest
  pending W, and the last ``r`` Ws close the step — so the deferred Ws fill the cool-down
  bubble, which is ``r`` backward passes long on rank ``r``, while activation memory stays
  at 1F1B's (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Sec. 3.1, ZB-H1). This is
  the order PyTorch runs: ``ScheduleInterleavedZeroBubble`` with one stage per rank
  (``_get_1f1b_rank_ops(..., num_1f1b_microbatches=rank, enable_zero_bubble=True)`` in
  torch/distributed/pipelining/schedules.py, torch 2.13), without its idle placeholders.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

Kind = Literal["F", "B", "W"]
Op = tuple[Kind, int, int]


def gpipe(p: int, m: int, rank: int) -> list[Op]:
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def one_f_one_b(p: int, m: int, rank: int) -> list[Op]:
    warmup = min(p - rank - 1, m)
    ops: list[Op] = [("F", i, 0) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        ops.append(("F", f, 0))
        f += 1
        ops.append(("B", b, 0))
        b += 1
    ops += [("B", i, 0) for i in range(b, m)]
    return ops


def interleaved(p: int, m: int, rank: int, v: int) -> list[Op]:
    """Megatron-LM's interleaved order (``m`` a multiple of ``p``)."""
    total, group = m * v, p * v
    # the k-th forward (backward) runs micro-batch (k // pv) p + k % p through chunk (k // p) % v (v - 1 - that)
    forwards = [("F", k // group * p + k % p, k // p % v) for k in range(total)]
    backwards = [("B", k // group * p + k % p, v - 1 - k // p % v) for k in range(total)]
    warmup = min((p - rank - 1) * 2 + (v - 1) * p, total)
    ops: list[Op] = forwards[:warmup]
    for f in range(warmup, total):  # steady state: one forward, one backward
        ops.append(forwards[f])
        ops.append(backwards[f - warmup])
    ops += backwards[total - warmup :]
    return ops


def zb_h1(p: int, m: int, rank: int) -> list[Op]:
    """PyTorch's zero-bubble order for one stage per rank (mirrors ``_get_1f1b_rank_ops``)."""
    warmup = min(p - rank - 1, m)
    ops: list[Op] = [("F", i, 0) for i in range(warmup)]
    weights = 0
    for k in range(m):  # the k-th backward, after the 1F1B forward that precedes it
        if warmup + k < m:
            ops.append(("F", warmup + k, 0))
        ops.append(("B", k, 0))
        if k >= rank:
            ops.append(("W", weights, 0))
            weights += 1
    return ops + [("W", i, 0) for i in range(weights, m)]


@lru_cache(maxsize=1024)
def order(schedule: str, p: int, m: int, rank: int, v: int) -> tuple[Op, ...]:
    """The F/B (and, for ZB-H1, W) order of ``rank`` (a pure function of its arguments, built once each)."""
    if schedule == "gpipe":
        return tuple(gpipe(p, m, rank))
    if schedule == "interleaved" and v > 1:
        return tuple(interleaved(p, m, rank, v))
    if schedule == "zb-h1":
        assert v == 1, "zb-h1 has one stage per rank (plan rule vpp-needs-interleaved)"
        return tuple(zb_h1(p, m, rank))
    return tuple(one_f_one_b(p, m, rank))
