"""Steps multipliers of the asynchronous methods (``async_ps``, ``easgd``) at any number of replicas, derived from
the asynchronous-SGD convergence bounds and anchored at plait's measured two-replica figures.

The bound. Asynchronous SG over a computer network (Lian, Huang, Li & Liu, NeurIPS 2015, "Asynchronous Parallel
Stochastic Gradient for Nonconvex Optimization", Theorem 1) converges at its ergodic rate when the steplength
meets the theorem's condition, which for a constant steplength ``gamma`` (per sample: an update sums ``M``
gradients) reads

    L M gamma + 2 L^2 M^2 T^2 gamma^2 <= 1,

``T`` the largest staleness. Writing ``u = L M gamma``, the largest allowed step solves ``u + 2 T^2 u^2 = 1``:
``u(T) = 2 / (1 + sqrt(1 + 8 T^2))`` (``u(0) = 1``). The bound's optimisation term ``2 (f(x_1) - f*) / (M K gamma)``
shrinks with the progress per sample, ``gamma``. Synchronous SGD over ``N`` replicas takes one update of ``N M``
samples at ``T = 0`` (``L N M gamma <= 1``); asynchronous SGD takes ``N`` updates of ``M`` samples each at
``L M gamma <= u(T)``. Per sample the asynchronous step is ``N u(T)`` times the synchronous one, so the bound needs

    factor(N, T) = 1 / (N u(T)) = (1 + sqrt(1 + 8 T^2)) / (2 N)

times the samples (1 at ``N = 2, T = 1``; ``sqrt(2)`` as ``N`` grows with ``T = N - 1``). Its noise term gives no
slowdown (Lian et al. 2015, Corollary 2: linear speedup while ``N <= sqrt(K)``), so the factor is the bound's
worst case over the run.

The staleness. ``T`` is taken as the concurrency ``N - 1``: each update is stale by the other workers' updates in
flight. With unequal workers the largest delay grows without bound, but asynchronous SGD with a stepsize set by the
number of workers converges at a rate that depends on that number, not on the delays (Mishchenko, Bach, Even &
Woodworth, NeurIPS 2022, "Asynchronous SGD Beats Minibatch SGD Under Arbitrary Delays", abstract), so
a mixed-speed cluster's workers count as ``N - 1``. A staleness bound ``B`` of Stale Synchronous Parallel (Ho et
al., NeurIPS 2013) holds the fastest workers back; it does not make an update fresher than its round's others.

The anchor. The factor is a bound, and what it leaves out (AdamW's moments, the model) sets a constant: plait
scales its measured two-replica multiplier (``data/convergence.toml``, ``plait converge``) by ``factor(N, N - 1) /
factor(2, 1)``. For ``async_ps`` every measured staleness at two replicas is one method (two equal workers alternate
at staleness 1: :mod:`plait.events.async_sgd`), so their mean anchors it; EASGD's anchor is its own spec at
two replicas with the same elastic rate per round, ``beta = p alpha`` (Zhang, Choromanska & LeCun, NeurIPS 2015,
Sec. 5 set ``alpha = beta / p`` with ``beta = 0.9``), and ``p alpha > 1`` is left without a figure: the centre would
move past every worker in one round.
"""

from __future__ import annotations

import math

from plait.sync import SyncMethod
from plait.sync.registry import parsed

ANCHOR_REPLICAS = 2
"""Replicas of plait's measured asynchronous figures (``plait converge --ranks 2``)."""


def staleness_factor(replicas: int, staleness: int) -> float:
    """Samples asynchronous SGD over ``replicas`` workers with largest staleness ``staleness`` needs over synchronous
    SGD's to reach the same bound: ``(1 + sqrt(1 + 8 T^2)) / (2 N)`` (module docstring; Lian et al. 2015, Theorem 1's
    steplength condition)."""
    if replicas < 1 or staleness < 0:
        raise ValueError(f"replicas={replicas} must be >= 1 and staleness={staleness} >= 0")
    return (1.0 + math.sqrt(1.0 + 8.0 * staleness * staleness)) / (2.0 * replicas)


def concurrency_staleness(replicas: int) -> int:
    """The staleness the bound takes for ``replicas`` workers: the others' updates in flight (Mishchenko et al. 2022)."""
    return max(replicas - 1, 0)


def replica_scale(replicas: int) -> float:
    """How the steps multiplier grows from the two-replica anchor to ``replicas`` replicas."""
    def at(n: int) -> float:
        return staleness_factor(n, concurrency_staleness(n))

    return at(replicas) / at(ANCHOR_REPLICAS)


def anchors(method: SyncMethod, replicas: int, measured: dict[str, list[tuple[float, int | None, str]]]) -> list[
        tuple[float, str]]:
    """(multiplier, source) of the two-replica figures ``method`` at ``replicas`` replicas scales from: the same
    method and period, at the same elastic rate per round (``p alpha``; 0 for ``async_ps``). ``measured``: spec ->
    (multiplier, replicas, source) of the table's known figures."""
    beta = method.elastic_force * replicas
    out = []
    for spec, figures in measured.items():
        other = parsed(spec)
        if other.name != method.name or other.every != method.every:
            continue
        if not math.isclose(other.elastic_force * ANCHOR_REPLICAS, beta, rel_tol=1e-9, abs_tol=1e-12):
            continue
        out += [(m, f"{spec} at {n} replicas") for m, n, _ in figures if n == ANCHOR_REPLICAS]
    return out


def derived_multiplier(method: SyncMethod, replicas: int,
                       measured: dict[str, list[tuple[float, int | None, str]]]) -> tuple[float | None, str]:
    """(steps multiplier, source) of asynchronous ``method`` at ``replicas`` replicas (``None``: no figure, and why)."""
    if method.elastic_force * replicas > 1.0:
        return None, (f"{method.spec}: alpha x replicas = {method.elastic_force * replicas:g} > 1 (Zhang et al. 2015 "
                      f"take alpha = 0.9 / p; use alpha={0.9 / replicas:.6g})")
    found = anchors(method, replicas, measured)
    if not found:
        return None, f"no measured two-replica figure of {method.name} with every={method.every} at alpha x p = " \
                     f"{method.elastic_force * replicas:g} to scale from (plait converge --dp-sync ... --ranks 2)"
    anchor = sum(m for m, _ in found) / len(found)
    scale = replica_scale(replicas)
    return anchor * scale, (f"{anchor:.4g} (mean of {', '.join(s for _, s in found)}, measured) x {scale:.4g}: "
                            f"the Lian et al. 2015 Theorem 1 step bound (1 + sqrt(1 + 8 T^2)) / (2 N) at N = "
                            f"{replicas}, T = {concurrency_staleness(replicas)} over N = 2, T = 1 "
                            "(plait.plan.async_convergence)")
