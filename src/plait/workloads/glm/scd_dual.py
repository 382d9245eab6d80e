"""Stochastic dual coordinate ascent (SDCA) of ridge regression split by example, with the workers' updates
aggregated: coordinate descent when the data is distributed by example (Parnell et al., arXiv 1702.07005; the
by-feature split is :mod:`.scd`).

Ridge regression's dual keeps one variable ``alpha_i`` per example and ``w = X^T alpha / (l2 N)``; one dual
coordinate step maximises the dual exactly in ``alpha_i`` (Shalev-Shwartz & Zhang, JMLR 2013, "Stochastic Dual
Coordinate Ascent Methods", the squared loss's closed form):
``delta_i = (y_i - x_i . w - alpha_i) / (1 + |x_i|^2 / (l2 N))``, then ``w += delta_i x_i / (l2 N)``.
A worker takes ``block`` examples of its random order at a time from one ``w`` (stale updates, as in :mod:`.scd`).

Split by example over ``K`` workers, each proposes ``delta_k`` for its examples and ``u_k = X_k^T delta_k / (l2 N)``;
the updates are aggregated as ``alpha += gamma delta``, ``w += gamma u`` with ``u = sum_k u_k`` (one all-reduce of
``D`` floats per epoch, and two scalars). ``optimal`` is the exact line search of the dual
``D(alpha) = sum_i (alpha_i y_i - alpha_i^2 / 2) / N - l2 / 2 |w(alpha)|^2`` along ``delta``, closed for the squared
loss: ``gamma* = (sum_i delta_i (y_i - alpha_i) / N - l2 w . u) / (sum_i delta_i^2 / N + l2 u . u)``; ``average``
and ``add`` are CoCoA's ``1 / K`` and ``1`` (:mod:`.scd`).

Tensor legend: ``n`` a worker's examples, ``D`` features.
"""

from __future__ import annotations

import torch

from plait.workloads.glm.scd import Reduce, Rule, objective, order_of


def dual_objective(x_ND: torch.Tensor, y_N: torch.Tensor, alpha_N: torch.Tensor, l2: float) -> float:
    """``D(alpha)`` (module docstring); its maximum is the least primal objective (strong duality)."""
    n = len(y_N)
    w_D = x_ND.T @ alpha_N / (l2 * n)
    return float((alpha_N @ y_N - alpha_N @ alpha_N / 2) / n - l2 / 2 * w_D @ w_D)


def dual_local_epoch(x_nD: torch.Tensor, y_n: torch.Tensor, alpha_n: torch.Tensor, w_D: torch.Tensor, l2: float,
                     samples: int, block: int, order: torch.Tensor) -> torch.Tensor:
    """One worker's epoch over its examples in ``order``, ``block`` at a time from one ``w``; its proposed change
    ``delta_n`` (``alpha_n`` and ``w_D`` unchanged). ``samples``: ``N``, every worker's examples."""
    scale = l2 * samples
    w_D, delta_n = w_D.clone(), torch.zeros_like(alpha_n)
    norms_n = 1 + (x_nD * x_nD).sum(dim=1) / scale
    for start in range(0, len(order), block):
        idx = order[start:start + block]
        step = (y_n[idx] - x_nD[idx] @ w_D - alpha_n[idx] - delta_n[idx]) / norms_n[idx]
        delta_n[idx] += step
        w_D += x_nD[idx].T @ step / scale
    return delta_n


def dual_step_size(rule: Rule, workers: int, sums: torch.Tensor, w_D: torch.Tensor, u_D: torch.Tensor, l2: float,
                   samples: int) -> float:
    """``gamma`` of ``rule`` (module docstring); ``sums``: ``sum_i delta_i (y_i - alpha_i)`` and
    ``sum_i delta_i^2`` over every worker's examples."""
    if rule == "average":
        return 1.0 / workers
    if rule == "add":
        return 1.0
    curvature = float(sums[1]) / samples + l2 * float(u_D @ u_D)
    return (float(sums[0]) / samples - l2 * float(w_D @ u_D)) / curvature if curvature > 0 else 0.0


def sdca_epoch(x_nD: torch.Tensor, y_n: torch.Tensor, alpha_n: torch.Tensor, w_D: torch.Tensor, l2: float,
               samples: int, block: int, rule: Rule, workers: int, order: torch.Tensor, reduce: Reduce) -> None:
    """One epoch of one worker among ``workers`` (``reduce`` sums over them), in place on ``alpha_n`` and
    ``w_D``."""
    delta_n = dual_local_epoch(x_nD, y_n, alpha_n, w_D, l2, samples, block, order)
    u_D = reduce(x_nD.T @ delta_n / (l2 * samples))
    sums = reduce(torch.stack([delta_n @ (y_n - alpha_n), delta_n @ delta_n]))
    gamma = dual_step_size(rule, workers, sums, w_D, u_D, l2, samples)
    alpha_n += gamma * delta_n
    w_D += gamma * u_D


def sdca_in_one_process(x_ND: torch.Tensor, y_N: torch.Tensor, l2: float, block: int, rule: Rule, workers: int,
                        epochs: int, seed: int) -> tuple[list[float], list[float]]:
    """``workers`` example-split workers emulated in turn in one process; the primal and the dual objective after
    each epoch."""
    n, rows = len(y_N), len(y_N) // workers
    alpha_N, w_D = torch.zeros(n), torch.zeros(x_ND.shape[1])
    primal, dual = [], []
    for epoch in range(epochs):
        parts = [slice(k * rows, (k + 1) * rows) for k in range(workers)]
        deltas = [dual_local_epoch(x_ND[s], y_N[s], alpha_N[s], w_D, l2, n, block, order_of(rows, seed, k, epoch))
                  for k, s in enumerate(parts)]
        u_D = sum(x_ND[s].T @ d / (l2 * n) for s, d in zip(parts, deltas, strict=True))
        sums = sum(torch.stack([d @ (y_N[s] - alpha_N[s]), d @ d]) for s, d in zip(parts, deltas, strict=True))
        gamma = dual_step_size(rule, workers, sums, w_D, u_D, l2, n)  # type: ignore[arg-type]
        for s, d in zip(parts, deltas, strict=True):
            alpha_N[s] += gamma * d
        w_D += gamma * u_D
        primal.append(objective(x_ND, y_N, w_D, l2))
        dual.append(dual_objective(x_ND, y_N, alpha_N, l2))
    return primal, dual
