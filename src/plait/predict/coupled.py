"""The step of FSDP2 replicas that run different numbers of micro-batches: their per-block collectives couple them.

plait's runtime accumulates over micro-batches under FSDP2 without communicating between them
(:func:`plait.run.train.gather_once`): every rank gathers each block's parameters in its first micro-batch's
forward, keeps them, and reduce-scatters each block's gradients (ZeRO-3: after gathering them again) in its last
micro-batch's backward. A collective completes only when every rank of its group has issued it, and FSDP2 issues
the next block's all-gather only when that block is reached (one block of backward prefetch,
``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``; on CPU ranks every all-gather and reduce-scatter is a
blocking call, ``_fsdp_collectives.py``). So with ``L`` blocks and group ``r`` taking ``f_r`` and ``b_r`` seconds
for one micro-batch's forward and backward and running ``m_r`` micro-batches:

- the first forward goes block by block at the slowest group's pace: it ends ``max_r f_r`` after the step starts;
- each group then runs alone, ``(m_r - 1) (f_r + b_r)`` (the first backward, the middle micro-batches and the last
  forward), and starts its last backward at ``s_r = max f + (m_r - 1)(f_r + b_r)``;
- ZeRO-2: the last backward's first block ends at ``max_r (s_r + b_r / L)`` (its reduce-scatter waits for the
  last rank to get there), and every later block at the slowest group's pace: ``(1 - 1/L) max_r b_r`` more;
- ZeRO-3: the last backward starts with a re-gather (the root's, and through FSDP2's prefetch the last block's,
  in the pre-backward hook on the model's output), so no rank computes any of it before the last one gets there:
  it ends at ``max_r s_r + max_r b_r``.

The groups' own remainders (optimizer, the step's other collectives) follow, the longest setting the end. With equal
micro-batch counts and speeds this is ``m (f + b)``, the uncoupled step. Observed on 2 gloo ranks, batch split 12+4,
rank 1 slowed 3x (benchmarks/uneven_vs_predict.py, collectives logged per call): rank 0's forward all-gathers wait
for rank 1's blocks; under ZeRO-2 rank 1 computes its last block's backward and then waits at its reduce-scatter
for rank 0's last micro-batch, under ZeRO-3 it waits at the root's re-gather before computing any of it.
"""

from __future__ import annotations

from collections.abc import Sequence


def coupled_step_s(forward_s: Sequence[float], backward_s: Sequence[float], micro_batches: Sequence[int],
                   rest_s: Sequence[float], num_blocks: int, regathered: bool) -> float:
    """Step time of FSDP2 groups coupled at their per-block collectives (module docstring); one entry per group:
    ``forward_s``/``backward_s`` of one micro-batch, ``micro_batches`` per step, ``rest_s`` after the backward;
    ``regathered``: the last backward re-gathers first (ZeRO-3)."""
    assert num_blocks >= 1 and len({len(forward_s), len(backward_s), len(micro_batches), len(rest_s)}) == 1
    first = max(forward_s)
    starts = [first + (m - 1) * (f + b) for f, b, m in zip(forward_s, backward_s, micro_batches, strict=True)]
    if regathered:
        return max(starts) + max(backward_s) + max(rest_s)
    first_block = max(s + b / num_blocks for s, b in zip(starts, backward_s, strict=True))
    return first_block + (1 - 1 / num_blocks) * max(backward_s) + max(rest_s)
