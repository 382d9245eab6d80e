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

TOPOLOGIES = ("ring", "torus", "exponential", "random", "complete")
UNDIRECTED = ("ring", "torus", "complete")
"""Topologies whose replicas send to the replicas they receive from."""
RANDOM_DRAWS = 64
"""Steps of the ``random`` topology averaged for its consensus rate (the draws of steps 0..63)."""


def _torus_shape(n: int) -> tuple[int, int]:
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return rows, n // rows


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
    return RANDOM_DRAWS if topology == "random" else 1


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
