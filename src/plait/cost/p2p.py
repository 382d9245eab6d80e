"""Pipeline transfers: the time of one hop between neighbouring stages and how many lie on the critical path.

A hop sends one micro-batch's activation (forward) or its gradient (backward). Megatron's scatter/gather
optimisation (Narayanan et al., SC 2021, Sec. 4.1) splits it over the stage's TP ranks, each sending its slice
over its own link, and all-gathers it over the receiving stage's scale-up links.

Where transfers run beside compute (:attr:`plait.engine.facts.EngineFacts.p2p_blocking` false, today's engines):
1F1B-style schedules wait for each micro-batch's activation and gradient (``2 m`` hops); the interleaved schedule
hides its steady-state transfers behind its other chunks and pays the fill and drain through every chunk boundary,
``2 (p v - 1)``; ZB-H1's W passes hide them after the fill, leaving ``2 (p - 1) + 2 clip(m - 2, 0, p - 1)``
(PyTorch's order, simulated). The receiving all-gather is not counted there.

Megatron-LM of 2021 blocks on every transfer (``p2p_blocking``): ``_communicate`` issues the chunk's sends and
receives with ``batch_isend_irecv``, waits on each request, calls ``torch.cuda.synchronize()`` and only then
all-gathers the received slice over the TP group (``mpu.gather_split_1d_tensor``: torch's list-form
``all_gather``, one output view per rank) before the next chunk runs (megatron/p2p_communication.py and
megatron/mpu/utils.py @90e0a0dd, 2021-06-11). Its interleaved schedule (megatron/schedules.py
``forward_backward_pipelining_with_interleaving``, same commit) calls it after every forward and backward chunk, so
every chunk's activation and gradient is a hop on the critical path, ``2 m v`` of them, each followed by a host
round trip and the gather, as 1F1B's ``2 m``.
"""

from __future__ import annotations

from typing import Any

from plait.cost.host import sync_s
from plait.cost.links import collective_s
from plait.cost.shard_calls import gather_call_s
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns


def hop_s(cluster: Cluster, cols: PlanColumns, p2p_bytes: Any, framework: EngineFacts) -> Any:
    """Seconds of one hop (module docstring): the send of each TP rank's slice of ``p2p_bytes`` between ranks
    ``dp * cp * tp`` apart; where transfers block, plus one host round trip and the list-form all-gather of the
    ``tp`` slices over the TP group (:func:`plait.cost.shard_calls.gather_call_s`: its per-rank copies)."""
    tp = cols["tp"]
    send = collective_s(cluster, "p2p", cols["pp"], tp * cols["cp"] * cols.dp, p2p_bytes)
    if not framework.p2p_blocking:
        return send
    eff = cluster.accelerator.efficiency
    gather = gather_call_s(
        collective_s(cluster, "all_gather", tp, 1, p2p_bytes * tp),
        tp,
        eff.host_launch_us.value,
        eff.kernel_launch_us.value,
        cols.xp,
    )
    return cols.xp.where(send > 0, send + sync_s(cluster) + gather, 0.0)


def critical_hops(cols: PlanColumns, framework: EngineFacts) -> Any:
    """Hops on the critical path of one step (module docstring); 0 without a pipeline."""
    xp, pp, m, v = cols.xp, cols["pp"], cols.num_micro_batches, cols["vpp"]
    zb_hops = 2 * (pp - 1) + 2 * xp.minimum(xp.maximum(m - 2, 0), pp - 1)
    interleaved = 2 * m * v if framework.p2p_blocking else 2 * (pp * v - 1)
    hops = xp.where(v > 1, interleaved, xp.where(cols.is_("schedule", "zb-h1"), zb_hops, 2 * m))
    return xp.where(pp > 1, hops, 0)
