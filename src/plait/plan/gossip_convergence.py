"""Steps multipliers of ``gossip`` beyond the replicas they were measured at, from the decentralized-SGD bound's
dependence on the consensus rate, anchored at plait's measured four-replica figures.

The bound. Decentralized SGD with a mixing matrix of consensus rate ``p`` (Koloskova, Loizou, Boreiri, Jaggi &
Stich, ICML 2020, "A Unified Theory of Decentralized SGD with Changing Topology and Local Updates", Assumption 4;
:func:`plait.plan.gossip.consensus_rate`) reaches an ``epsilon``-stationary point of a smooth non-convex objective
in (Theorem 2)

    O( sigma^2 / (n epsilon^2) + (zeta tau + sigma sqrt(p tau)) / (p epsilon^{3/2}) + tau / (p epsilon) )

iterations (the non-convex case; constants and the factor ``L (f(x_0) - f*)`` left out; ``tau = 1`` for a mixing
every step). The first term is mini-batch SGD's over
``n`` replicas, which the all-reduce also pays; every term beyond it, the steps decentralized SGD needs beyond the
all-reduce's, carries ``1 / p`` (the ``sigma`` part of the middle term ``1 / sqrt(p)``, which grows more slowly:
``1 / p`` is the bound's worst case). Lian et al. (NeurIPS 2017, Theorem 1 and Corollary 2) give the same picture
for a fixed symmetric ``W``: the iterations before the linear speed-up grow as ``1 / (1 - rho)^2``, and ``p = 1 -
rho^2`` lies between ``1 - rho`` and ``2 (1 - rho)``.

The anchor. What the bound leaves out (AdamW, the model, the data) sets its constants: plait measures the steps
multiplier ``m`` of each topology at four replicas (``plait converge --ranks 4``, ``data/convergence.toml``) and
scales the extra steps by the ratio of the consensus rates,

    m(n) = 1 + (m(4) - 1) p(4) / p(n),

a bound's ratio, not a measurement (as the asynchronous methods' beyond two replicas:
:mod:`plait.plan.async_convergence`). The fixed ring's ``p`` falls as ``1 / n^2``, so its multiplier grows
quadratically with the replicas; the randomized ring's stays near 2/3 (:func:`plait.plan.gossip.random_ring_rate`)
and its multiplier near the measured one.
"""

from __future__ import annotations

from plait.plan.gossip import consensus_rate
from plait.sync import SyncMethod
from plait.sync.registry import canonical

ANCHOR_REPLICAS = 4
"""Replicas of plait's measured gossip figures (``plait converge --ranks 4``)."""


def rate_scale(method: SyncMethod, replicas: int) -> float:
    """``p(4) / p(n)``: how much the extra steps grow from the anchor to ``replicas`` replicas (``method``: one
    whose :meth:`~plait.sync.SyncMethod.graph` is set, gossip)."""
    graph = method.graph()
    assert graph is not None, f"{method.spec} has no gossip graph"
    topology, peers = graph
    return consensus_rate(topology, ANCHOR_REPLICAS, peers) / consensus_rate(topology, replicas, peers)


def derived_multiplier(method: SyncMethod, replicas: int,
                       measured: dict[str, list[tuple[float, int | None, str]]]) -> tuple[float | None, str]:
    """(steps multiplier, source) of ``method`` at ``replicas`` replicas from its own measured four-replica figure
    (``None``: none measured). ``measured``: spec -> (multiplier, replicas, source) of the table's measured figures."""
    own = method.spec
    found = [m for spec, figures in measured.items() if canonical(spec) == own
             for m, n, _ in figures if n == ANCHOR_REPLICAS]
    if not found:
        return None, (f"no measured {ANCHOR_REPLICAS}-replica figure of {method.spec} to scale from "
                      f"(plait converge --dp-sync {method.stated} --ranks {ANCHOR_REPLICAS} --steps 300 --window 30)")
    anchor, scale = found[0], rate_scale(method, replicas)
    return 1.0 + (anchor - 1.0) * scale, (
        f"1 + ({anchor:.4g} - 1) x {scale:.4g}: the measured {ANCHOR_REPLICAS}-replica multiplier's extra steps "
        f"scaled by the consensus rates p({ANCHOR_REPLICAS}) / p({replicas}) of topology={rate_topology(method)} "
        "(Koloskova et al. ICML 2020, Theorem 2: the steps beyond the all-reduce's grow as 1/p; a bound's ratio, "
        "plait.plan.gossip_convergence)")


def rate_topology(method: SyncMethod) -> str:
    """The topology whose consensus rate scales ``method``'s multiplier."""
    graph = method.graph()
    return graph[0] if graph is not None else "none"
