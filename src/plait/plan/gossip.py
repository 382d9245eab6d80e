"""Who averages with whom under ``gossip`` (decentralized SGD): neighbours, mixing matrix, spectral gap.

After each optimizer step replica ``i`` replaces its parameters by ``sum_j W[i, j] x_j`` over itself and the
replicas it receives from (D-PSGD, Lian et al., NeurIPS 2017, Algorithm 1, in the adapt-then-combine order that
Koloskova et al., ICML 2020, Algorithm 1 also analyse). Topologies, on ``n`` replicas numbered as their ranks:

- ``ring``: the replicas ``i - 1`` and ``i + 1``;
- ``torus``: a ``rows x cols`` torus (``rows`` the largest divisor of ``n`` at most ``sqrt(n)``; a ring when ``n`` is
  prime), four neighbours;
- ``exponential``: receive from ``i - 2^k`` (Ying et al., NeurIPS 2021, "Exponential graph is provably efficient
  for decentralized deep training"): with ``peers=K`` below ``tau = ceil(log2 n)``, ``K`` of the ``tau`` offsets,
  taken in turn each step (the one-peer exponential graph at ``K = 1``); at ``K >= tau`` the static graph;
- ``random_ring``: each step the replicas are laid on a ring in an order drawn by a generator seeded with the
  step (the same draw on every replica), each averaging with its two neighbours on that ring (randomized local
  averaging: Zhang, Cui et al., ICASSP 2020, arXiv 2002.01119, and the same group's TASLP 2021 paper, arXiv
  2110.11199, "randomized communication patterns on a ring"; :func:`random_ring_rate` for its consensus rate);
- ``random``: each step ``K`` distinct offsets ``d`` drawn from ``1..n-1`` by a generator seeded with the step (the
  same draw on every replica): receive from ``i - d``, send to ``i + d`` (randomized gossip, Boyd et al. 2006);
- ``complete``: every replica, uniform weights: the all-reduce average.

Every topology here is regular (each replica receives from as many as every other), so the undirected graphs'
Metropolis-Hastings weights ``W[i, j] = 1 / (1 + max(d_i, d_j))`` (Xiao & Boyd 2004, "Fast linear iterations for
distributed averaging", Sec. 4.2) are ``1 / (d + 1)``, as the directed circulant ones weight each of the ``m``
received copies and the own: every ``W`` is doubly stochastic, so the replicas' mean evolves as under the
all-reduce.

How fast the replicas agree: the consensus rate ``p = 1 - lambda_max(E[W^T W] - J)`` with ``J = 11^T / n``
(Koloskova et al. 2020, Assumption 4; the expectation over the steps of a period, or over the random draws); plait
shows the spectral gap ``1 - sqrt(1 - p)``, which for a fixed symmetric ``W`` is ``1 - |lambda_2(W)|``, the
``1 - rho`` of Lian et al. 2017 (Theorem 1: the extra iterations decentralized SGD needs before it runs at the
all-reduce's rate grow as ``1 / (1 - rho)^2``; Koloskova et al. 2020, Theorem 2: as ``1 / p``).
"""

from __future__ import annotations

import math
import random
from functools import cache

import numpy as np

TOPOLOGIES = ("ring", "torus", "exponential", "random", "complete", "random_ring")
UNDIRECTED = ("ring", "torus", "complete", "random_ring")
"""Topologies whose replicas send to the replicas they receive from."""
RANDOM_DRAWS = 64
"""Steps of the ``random`` topology averaged for its consensus rate (the draws of steps 0..63)."""


def _torus_shape(n: int) -> tuple[int, int]:
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return rows, n // rows


@cache
def _ring_order(n: int, step: int) -> tuple[int, ...]:
    """The ``random_ring`` order of ``step``: a uniformly random permutation of the ``n`` replicas, drawn by a
    generator seeded with the step, so every replica draws the same."""
    return tuple(random.Random(f"random_ring/{step}").sample(range(n), n))


@cache
def _ring_neighbours(n: int, step: int) -> tuple[tuple[int, int], ...]:
    """(left, right) neighbour of each replica on the ring of ``step``."""
    order = _ring_order(n, step)
    out = [(0, 0)] * n
    for k, i in enumerate(order):
        out[i] = (order[k - 1], order[(k + 1) % n])
    return tuple(out)


@cache
def _offsets(topology: str, n: int, peers: int, step: int) -> tuple[int, ...]:
    """Offsets ``d`` such that replica ``i`` receives from ``i - d`` (directed circulant topologies)."""
    if topology == "exponential":
        tau = max(1, math.ceil(math.log2(n)))
        if peers >= tau:
            return tuple(2**k for k in range(tau))
        return tuple(2 ** ((step * peers + k) % tau) for k in range(peers))
    draw = random.Random(step)
    return tuple(draw.sample(range(1, n), min(peers, n - 1)))


def sources(topology: str, n: int, peers: int, step: int, i: int) -> list[int]:
    """The replicas ``i`` receives parameters from at ``step`` (sorted, without ``i``)."""
    if n <= 1:
        return []
    if topology == "complete":
        found = set(range(n))
    elif topology == "ring":
        found = {(i - 1) % n, (i + 1) % n}
    elif topology == "random_ring":
        found = set(_ring_neighbours(n, step)[i])
    elif topology == "torus":
        rows, cols = _torus_shape(n)
        r, c = divmod(i, cols)
        found = {((r - 1) % rows) * cols + c, ((r + 1) % rows) * cols + c, r * cols + (c - 1) % cols,
                 r * cols + (c + 1) % cols}
    else:
        found = {(i - d) % n for d in _offsets(topology, n, peers, step)}
    found.discard(i)
    return sorted(found)


def targets(topology: str, n: int, peers: int, step: int, i: int) -> list[int]:
    """The replicas ``i`` sends its parameters to at ``step``: those that receive from it (its sources on the
    undirected graphs; ``i + d`` on the circulant ones)."""
    if topology in UNDIRECTED or n <= 1:
        return sources(topology, n, peers, step, i)
    return sorted({(i + d) % n for d in _offsets(topology, n, peers, step)} - {i})


def weights(topology: str, n: int, peers: int, step: int, i: int) -> dict[int, float]:
    """Row ``i`` of the mixing matrix: the weight of the own copy and of each source's, ``1 / (m + 1)`` each."""
    found = sources(topology, n, peers, step, i)
    return dict.fromkeys([i, *found], 1.0 / (len(found) + 1))


def mixing_matrix(topology: str, n: int, peers: int, step: int) -> np.ndarray:
    """``W`` (``n x n``): replica ``i``'s new parameters are ``sum_j W[i, j] x_j`` after ``step``."""
    w = np.zeros((n, n))
    for i in range(n):
        for j, weight in weights(topology, n, peers, step, i).items():
            w[i, j] = weight
    return w


def period(topology: str, n: int, peers: int) -> int:
    """Steps after which the topology repeats (1: the same every step)."""
    if topology == "exponential":
        tau = max(1, math.ceil(math.log2(max(n, 2))))
        return 1 if peers >= tau else tau // math.gcd(tau, peers)
    return RANDOM_DRAWS if topology in ("random", "random_ring") else 1


def _cycle_adjacency_spectrum(n: int) -> np.ndarray:
    """Eigenvalues of a cycle of ``n`` nodes' adjacency matrix, its repeated edges counted once (a circulant: the
    DFT of its first row)."""
    row = np.zeros(n)
    row[[d % n for d in {1, n - 1} if d % n]] = 1.0
    return np.fft.fft(row).real


@cache
def spectral_gap(topology: str, n: int, peers: int) -> float:
    """``1 - sqrt(1 - p)`` with ``p`` the consensus rate over a period (module docstring); 1 on one replica.

    Every ``W`` here but the torus's is circulant, so all of a period's share the Fourier basis: the eigenvalues of
    ``E[W^T W] - J`` are the mean ``|lambda_k|^2`` of each ``W``'s, the DFT of its first row, over ``k != 0`` (Gray,
    "Toeplitz and circulant matrices", Sec. 3.1). The torus is the Cartesian product of two cycles: its ``W =
    (I + A_rows x I + I x A_cols) / (d + 1)`` is symmetric with eigenvalues ``(1 + mu_a + nu_b) / (d + 1)``."""
    if n <= 1:
        return 1.0
    if topology == "random_ring":
        return 1.0 - math.sqrt(1.0 - random_ring_rate(n))
    if topology == "torus":
        rows, cols = _torus_shape(n)
        degree = len(sources(topology, n, peers, 0, 0))
        spectrum = (1 + _cycle_adjacency_spectrum(rows)[:, None] + _cycle_adjacency_spectrum(cols)[None, :])
        power = (spectrum.reshape(-1) / (degree + 1)) ** 2
    else:
        steps = period(topology, n, peers)
        rows = [np.zeros(n) for _ in range(steps)]
        for t, row in enumerate(rows):
            for j, weight in weights(topology, n, peers, t, 0).items():
                row[j] = weight
        power = np.mean([np.abs(np.fft.fft(row)) ** 2 for row in rows], axis=0)
    rho_squared = float(power[1:].max())  # index 0: the consensus mode (eigenvalue 1), which J removes
    return 1.0 - math.sqrt(max(0.0, rho_squared))


def random_ring_rate(n: int) -> float:
    """The consensus rate ``p`` of ``random_ring`` on ``n`` replicas, exactly (the expectation over every order).

    A step's ``W = (I + P + P^T) / 3`` for ``n >= 3``, ``P`` the permutation matrix of the drawn ring's shift, so
    ``W^T W = W^2 = (3 I + 2 P + 2 P^T + P^2 + P^-2) / 9`` (``P P^T = I``). Each of ``P``, ``P^T``, ``P^2``,
    ``P^-2`` is a permutation without fixed points (for ``n = 3``, ``P^2 = P^T``; for ``n = 4``, ``P^2 = P^-2``;
    the sum is the same), and the ring's order is uniformly random, so by symmetry each has expectation ``(11^T -
    I) / (n - 1)``: ``E[W^T W] = a I + b (11^T - I)`` with ``a = 1/3`` and ``b = 6 / (9 (n - 1)) = 2 / (3 (n -
    1))`` (rows sum to 1). Its eigenvalues are 1 on the consensus vector and ``a - b = (n - 3) / (3 (n - 1))`` on
    every other, so ``p = 1 - (n - 3) / (3 (n - 1)) = 2 n / (3 (n - 1))``, which falls to 2/3 as ``n`` grows, where
    the fixed ring's ``1 - ((1 + 2 cos(2 pi / n)) / 3)^2 ~ 8 pi^2 / (3 n^2)`` falls as ``1 / n^2`` (the reason
    for randomized local averaging: Zhang, Cui et al., arXiv 2002.01119, abstract: the fixed ring's spectral gap
    "decreases when the number of learners in the system increases"). On two replicas the one neighbour gets
    weight 1/2: ``W = J``, ``p = 1``."""
    if n <= 2:
        return 1.0
    return 2.0 * n / (3.0 * (n - 1))


def consensus_rate(topology: str, n: int, peers: int) -> float:
    """``p = 1 - lambda_max(E[W^T W] - J)`` (Koloskova et al. 2020, Assumption 4), from :func:`spectral_gap`."""
    return 1.0 - (1.0 - spectral_gap(topology, n, peers)) ** 2
