"""Stochastic coordinate descent (SCD) of ridge regression split by feature, with the workers' updates aggregated.

The objective is ``F(w) = |X w - y|^2 / (2 N) + l2 / 2 |w|^2``. One coordinate step sets ``w_j`` to its exact
minimiser given the residual ``r = X w - y``: ``delta_j = -(x_j . r / N + l2 w_j) / (|x_j|^2 / N + l2)``.
A GPU runs many such steps at once, each from a residual the others' updates have not reached yet (the
asynchronous GPU SCD of Parnell et al., arXiv 1702.07005); here a worker takes ``block`` coordinates of its random
order at a time from one residual, then adds their effect to it: ``block - 1`` updates of staleness, emulated.

Split by feature over ``K`` workers, each runs an epoch over its own coordinates on its copy of the shared residual
and proposes ``d_k`` (its coordinates' change) and ``u_k = X_k d_k``; the updates are then aggregated as
``w += gamma d``, ``r += gamma u`` with ``u = sum_k u_k`` (one all-reduce of ``N`` floats per epoch). Parnell et al.
propose to aggregate "optimally" for data split by example or by feature (abstract); the form implemented here,
as read from that description (the paper's equations were not read here), is the exact line search along the summed
update, which for the squared loss is closed:
``gamma* = -(r . u / N + l2 w . d) / (u . u / N + l2 d . d)``; beside it CoCoA's two rules (Jaggi et al., NeurIPS
2014: averaging, ``gamma = 1 / K``; Ma et al., ICML 2015: adding, ``gamma = 1``). One worker with ``gamma = 1`` is
sequential SCD. The squared loss only; split by example: :mod:`.scd_dual`.

Tensor legend: ``N`` examples, ``C`` a worker's columns, ``D`` all columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

Rule = Literal["optimal", "average", "add"]
RULES: tuple[Rule, ...] = ("optimal", "average", "add")
"""How the workers' updates are combined (module docstring)."""

Reduce = Callable[[torch.Tensor], torch.Tensor]
"""A sum over the workers."""


def objective(x_ND: torch.Tensor, y_N: torch.Tensor, w_D: torch.Tensor, l2: float) -> float:
    """``F(w)`` (module docstring)."""
    r_N = x_ND @ w_D - y_N
    return float(r_N @ r_N / (2 * len(y_N)) + l2 / 2 * w_D @ w_D)


def optimum(x_ND: torch.Tensor, y_N: torch.Tensor, l2: float) -> float:
    """The least ``F(w)``: ``w* = (X^T X / N + l2 I)^-1 X^T y / N`` (the normal equations of ridge regression), in
    fp64."""
    x, y = x_ND.double(), y_N.double()
    n = len(y)
    w = torch.linalg.solve(x.T @ x / n + l2 * torch.eye(x.shape[1], dtype=x.dtype), x.T @ y / n)
    return objective(x, y, w, l2)


def local_epoch(x_NC: torch.Tensor, r_N: torch.Tensor, w_C: torch.Tensor, l2: float, block: int,
                order: torch.Tensor) -> torch.Tensor:
    """One worker's epoch over its columns in ``order``, ``block`` at a time from one residual; its proposed
    change ``d_C`` (``r_N`` and ``w_C`` unchanged)."""
    n = x_NC.shape[0]
    r_N, d_C = r_N.clone(), torch.zeros_like(w_C)
    norms_C = (x_NC * x_NC).sum(dim=0) / n + l2
    for start in range(0, len(order), block):
        idx = order[start:start + block]
        grad = x_NC[:, idx].T @ r_N / n + l2 * (w_C[idx] + d_C[idx])
        delta = -grad / norms_C[idx]
        d_C[idx] += delta
        r_N += x_NC[:, idx] @ delta
    return d_C


def step_size(rule: Rule, workers: int, r_N: torch.Tensor, u_N: torch.Tensor, wd: float, dd: float,
              l2: float) -> float:
    """``gamma`` of ``rule`` (module docstring); ``wd``, ``dd``: ``w . d`` and ``d . d`` summed over workers."""
    if rule == "average":
        return 1.0 / workers
    if rule == "add":
        return 1.0
    n = len(r_N)
    curvature = float(u_N @ u_N) / n + l2 * dd
    return -(float(r_N @ u_N) / n + l2 * wd) / curvature if curvature > 0 else 0.0


def order_of(columns: int, seed: int, worker: int, epoch: int) -> torch.Tensor:
    """Worker ``worker``'s random order of its ``columns`` in epoch ``epoch`` (the same in one process and on a
    rank)."""
    return torch.randperm(columns, generator=torch.Generator().manual_seed(seed * 1_000_003 + worker * 1009 + epoch))


def scd_epoch(x_NC: torch.Tensor, y_N: torch.Tensor, w_C: torch.Tensor, r_N: torch.Tensor, l2: float, block: int,
              rule: Rule, workers: int, order: torch.Tensor, reduce: Reduce) -> None:
    """One epoch of one worker among ``workers`` (``reduce`` sums over them), in place on ``w_C`` and ``r_N``."""
    d_C = local_epoch(x_NC, r_N, w_C, l2, block, order)
    u_N = reduce(x_NC @ d_C)
    dots = reduce(torch.stack([w_C @ d_C, d_C @ d_C]))
    gamma = step_size(rule, workers, r_N, u_N, float(dots[0]), float(dots[1]), l2)
    w_C += gamma * d_C
    r_N += gamma * u_N


def scd_in_one_process(x_ND: torch.Tensor, y_N: torch.Tensor, l2: float, block: int, rule: Rule, workers: int,
                       epochs: int, seed: int) -> list[float]:
    """``workers`` feature-split workers emulated in turn in one process; the objective after each epoch."""
    cols = x_ND.shape[1] // workers
    w_D, r_N = torch.zeros(x_ND.shape[1]), -y_N.clone()
    found = []
    for epoch in range(epochs):
        parts = [(slice(k * cols, (k + 1) * cols), order_of(cols, seed, k, epoch)) for k in range(workers)]
        d = [local_epoch(x_ND[:, s], r_N, w_D[s], l2, block, o) for s, o in parts]
        u_N = sum(x_ND[:, s] @ d_C for (s, _), d_C in zip(parts, d, strict=True))
        wd = sum(float(w_D[s] @ d_C) for (s, _), d_C in zip(parts, d, strict=True))
        dd = sum(float(d_C @ d_C) for d_C in d)
        gamma = step_size(rule, workers, r_N, u_N, wd, dd, l2)  # type: ignore[arg-type]
        for (s, _), d_C in zip(parts, d, strict=True):
            w_D[s] += gamma * d_C
        r_N += gamma * u_N
        found.append(objective(x_ND, y_N, w_D, l2))
    return found
