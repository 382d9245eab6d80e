"""Mini-batch SGD of a GLM in one process and its two splits over ranks, written out so that each rank's part is the
one-process step's slice (the maths is exact: the splits add the same products in another order).

- Data-parallel: rank ``r`` of ``W`` takes rows ``[r B / W, (r + 1) B / W)`` of each batch, its gradient sum is
  all-reduced (the model all-reduce, ``D`` floats), divided by ``B``.
- Feature-partitioned (P4SGD's model parallelism, arXiv 2305.05885): rank ``r`` holds columns
  ``[r D / W, (r + 1) D / W)`` and that slice of ``w``; the partial dot products ``X_r w_r`` (``B`` floats) are
  all-reduced into ``z``, from which every rank takes ``l'(z)`` and its slice's gradient.

Tensor legend: ``N`` examples, ``D`` features, ``B`` batch rows, ``C`` a rank's columns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as fn

from plait.workloads.glm.config import GlmRunConfig

Reduce = Callable[[torch.Tensor], torch.Tensor]
"""A sum over the ranks (identity in one process)."""


def make_data(cfg: GlmRunConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded examples ``X_ND`` (a ``density`` share of the entries nonzero) and labels ``y_N`` of a planted model
    (signs for logistic and hinge, values plus noise for squared)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    x_ND = torch.randn(cfg.samples, cfg.features, generator=gen)
    x_ND *= (torch.rand(cfg.samples, cfg.features, generator=gen) < cfg.density).float()
    z_N = x_ND @ torch.randn(cfg.features, generator=gen)
    if cfg.loss == "squared":
        return x_ND, z_N + 0.1 * torch.randn(cfg.samples, generator=gen)
    return x_ND, torch.where(z_N >= 0, 1.0, -1.0)


def loss_and_slope(z_B: torch.Tensor, y_B: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's loss and its derivative in ``z`` (:mod:`plait.workloads.glm.model`'s losses; the hinge's
    subgradient is 0 at the kink)."""
    if loss == "squared":
        return (z_B - y_B) ** 2 / 2, z_B - y_B
    margin_B = y_B * z_B
    if loss == "logistic":
        return fn.softplus(-margin_B), -y_B * torch.sigmoid(-margin_B)
    return torch.clamp(1 - margin_B, min=0), -y_B * (margin_B < 1).float()


def batch_rows(cfg: GlmRunConfig, step: int) -> slice:
    """The rows of step ``step``'s batch (consecutive batches, wrapping at the end of the data)."""
    start = (step * cfg.batch) % (cfg.samples - cfg.samples % cfg.batch)
    return slice(start, start + cfg.batch)


def data_parallel_step(x_BD: torch.Tensor, y_B: torch.Tensor, w_D: torch.Tensor, cfg: GlmRunConfig, rank: int,
                       world: int, reduce: Reduce) -> float:
    """One data-parallel step on this rank's rows (module docstring), in place on ``w_D``; the rank's loss sum."""
    share = cfg.batch // world
    x_bD, y_b = x_BD[rank * share:(rank + 1) * share], y_B[rank * share:(rank + 1) * share]
    loss_b, slope_b = loss_and_slope(x_bD @ w_D, y_b, cfg.loss)
    grad_D = reduce(x_bD.T @ slope_b) / cfg.batch + cfg.l2 * w_D
    w_D -= cfg.learning_rate * grad_D
    return float(loss_b.sum())


def feature_step(x_BC: torch.Tensor, y_B: torch.Tensor, w_C: torch.Tensor, cfg: GlmRunConfig,
                 reduce: Reduce) -> float:
    """One feature-partitioned step on this rank's columns (module docstring), in place on ``w_C``; the batch's
    loss sum."""
    z_B = reduce(x_BC @ w_C)
    loss_B, slope_B = loss_and_slope(z_B, y_B, cfg.loss)
    w_C -= cfg.learning_rate * (x_BC.T @ slope_B / cfg.batch + cfg.l2 * w_C)
    return float(loss_B.sum())


def sgd_reference(cfg: GlmRunConfig) -> tuple[list[float], torch.Tensor]:
    """One process: the batch's mean loss before each step, and ``w`` after ``cfg.steps`` steps from zero."""
    x_ND, y_N = make_data(cfg)
    w_D = torch.zeros(cfg.features)
    losses = []
    for step in range(cfg.steps):
        rows = batch_rows(cfg, step)
        losses.append(data_parallel_step(x_ND[rows], y_N[rows], w_D, cfg, 0, 1, lambda t: t) / cfg.batch)
    return losses, w_D
