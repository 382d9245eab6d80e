"""Hardware design search: the best plan on each of a grid of hypothetical clusters, and where a dollar helps most.

DeepFlow/CrossFlow (Ardalani, Pal and Gupta, "DeepFlow: A Cross-Stack Pathfinding Framework for Distributed AI
Systems", arXiv 2211.03309, https://arxiv.org/abs/2211.03309; ACM TODAES 29(2), 2024) goes from technology and
hardware parameters to the best parallel strategy. Its search (https://github.com/nanocad-lab/DeepFlow: ``main.py
arch_search`` -> ``outerloop_sweep``, ``GD_search.py`` ``do_GDSearch``) sweeps batch sizes and parallelism
strategies (dp, kp, lp and their placement on wafers) and, for each, descends over the split of a fixed chip's area,
power and perimeter budgets among cores, DRAM, caches, registers and links from 100 random starts: each fraction
raised by ``alpha = 1.1`` in turn, the gradient ``(t - t') / ((alpha - 1) x p)``, the fractions renormalised to
sum to one. plait keeps the +10% finite difference and changes three things: it varies a catalog system's
datasheet figures (:data:`plait.hardware.variation.PARAMETERS`; plait has no area or power technology model), the
planner picks the best plan at every point (so a sensitivity includes the change of plan it allows), and a price
stands in for the fixed budget: each step's gain is set against the price it adds. The search is a grid or list
of points, each costed by the planner (:func:`run_search`), not a descent: a 5 x 5 grid is 25 searches.

Every point is hypothetical (:mod:`plait.hardware.variation`) but the base point, and is labelled so.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.hardware.variation import PARAMETERS, Variation, scale_up_size, vary
from plait.search.pareto import Point, price
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.model import ModelSpec

STEP = 1.1
"""DeepFlow's perturbation (``alpha = 1.1`` in ``GD_search.py``): each parameter +10% for its sensitivity."""
DOMAIN_STEP = 2.0
"""The scale-up domain's step instead (assumed: a domain of 8.8 GPUs does not exist; domains come in powers of two,
8 on HGX, 72 on NVL72 boards of 4): the next size up, twice the GPUs."""
MAX_POINTS = 64
"""Most hardware points one design search costs (each a whole planner search: 0.5 s for llama3-70b on 1,024 GPUs
on one core)."""


@dataclass(frozen=True, kw_only=True)
class DesignRequest:
    """A design search: the model and base cluster, the GPUs and batch, and the hardware points."""

    model: ModelSpec
    """The model to train."""
    base: Cluster
    """The cluster the variations start from (its figures carry their sources)."""
    engine: Engine
    """The engine plans are ranked for."""
    gpus: tuple[int, ...]
    """GPU counts tried at every hardware point."""
    global_batches: tuple[int, ...]
    """Sequences per step to try."""
    tokens: float
    """Tokens to train."""
    shares: dict[str, float]
    """Price share per parameter (:func:`plait.hardware.variation.price_factor`)."""
    seq_len: int = 0
    """Tokens per sequence (0: the model's)."""


@dataclass(frozen=True, kw_only=True)
class DesignPoint:
    """One hardware point and the best plan on it (``None``: no plan fits)."""

    variation: Variation
    """How the point differs from the base."""
    cluster: Cluster
    """The (hypothetical) cluster."""
    gpus: int
    """GPUs of the point."""
    best: Point | None
    """The best plan priced for the tokens, failures included (:func:`plait.search.pareto.price`)."""
    infeasible: str = ""
    """Why no plan fits (the commonest reason of the search)."""

    @property
    def hypothetical(self) -> bool:
        """Whether the point is not the base cluster."""
        return self.variation.label != "base"


@dataclass(frozen=True, kw_only=True)
class Sensitivity:
    """The best plan's change when one parameter rises by its step."""

    parameter: str
    step: float
    """The factor applied (:data:`STEP`, :data:`DOMAIN_STEP` for the domain's size)."""
    step_time_change: float
    """Relative change of the best plan's step time (-0.05: 5% faster)."""
    price_change: float
    """Relative change of the price per GPU-hour (the assumed shares)."""
    cost_change: float
    """Relative change of the dollars to train."""
    energy_change: float | None
    """Relative change of the energy to train (``None``: the cluster's power is unknown)."""
    plan_changed: bool
    """Whether the best plan is another layout than the base's."""

    @property
    def elasticity(self) -> float:
        """``d ln t / d ln x`` over the step: ``ln(t'/t) / ln(step)``."""
        return math.log1p(self.step_time_change) / math.log(self.step)

    @property
    def time_per_price(self) -> float | None:
        """Step time gained per unit of price added (``None``: the price does not change)."""
        return None if self.price_change <= 0 else -self.step_time_change / self.price_change


def parse_values(text: str) -> tuple[str, tuple[float, ...]]:
    """``--vary peak=0.8,1,1.2`` as (parameter, factors)."""
    name, _, values = text.partition("=")
    name = name.strip()
    if name not in PARAMETERS or not values:
        raise ConfigError(f"--vary {text!r} must be PARAM=F1,F2,... with PARAM one of {', '.join(PARAMETERS)}")
    try:
        factors = tuple(float(v) for v in values.split(","))
    except ValueError:
        raise ConfigError(f"--vary {text!r}: factors must be numbers (1 = the base's figure)") from None
    for f in factors:
        Variation(factors=((name, f),))
    return name, tuple(dict.fromkeys(factors))


def grid(axes: list[tuple[str, tuple[float, ...]]]) -> list[Variation]:
    """Every combination of the axes' factors (the base alone where there are none)."""
    names = [n for n, _ in axes]
    if len(set(names)) != len(names):
        raise ConfigError(f"--vary names {names}: each parameter once")
    count = math.prod(len(v) for _, v in axes)  # counted before any point is built: a grid may be astronomical
    if count > MAX_POINTS:
        raise ConfigError(f"--vary gives {count} hardware points; one design search costs at most {MAX_POINTS}")
    points = [Variation(factors=tuple(zip(names, combo))) for combo in itertools.product(*(v for _, v in axes))]
    return points or [Variation(factors=())]


def best_on(request: DesignRequest, variation: Variation, gpus: int) -> DesignPoint:
    """The best plan on ``gpus`` GPUs of the varied cluster, priced for the request's tokens."""
    cluster = vary(request.base, variation, request.shares)
    space = default_space(request.model, cluster, gpus, request.global_batches, seq_len=request.seq_len)
    result = run_search(request.model, cluster, space, engine=request.engine, workers=1)
    best = result.top(1)
    if not best:
        reason = result.reasons.most_common(1)[0][0] if result.reasons else "no layout of these GPUs"
        return DesignPoint(variation=variation, cluster=cluster, gpus=gpus, best=None, infeasible=reason)
    return DesignPoint(variation=variation, cluster=cluster, gpus=gpus, best=price(best[0], request.tokens))


def search_grid(request: DesignRequest, variations: list[Variation]) -> list[DesignPoint]:
    """The best plan on every hardware point at every GPU count."""
    total = len(variations) * len(request.gpus)
    if total > MAX_POINTS:
        raise ConfigError(f"{len(variations)} hardware points x {len(request.gpus)} GPU counts = {total} searches; "
                          f"one design search costs at most {MAX_POINTS}")
    for gpus in request.gpus:
        if not 1 <= gpus <= request.base.max_gpus:
            raise ConfigError(f"--gpus {gpus} must be between 1 and the {request.base.max_gpus} GPUs of "
                              f"{request.base.name}")
    return [best_on(request, v, g) for v in variations for g in request.gpus]


def cheapest(points: list[DesignPoint], deadline_days: float | None) -> DesignPoint | None:
    """The point that trains the tokens for the fewest dollars within ``deadline_days`` (``None``: none does)."""
    ok = [p for p in points if p.best is not None and (deadline_days is None or p.best.days <= deadline_days)]
    return min(ok, key=lambda p: (p.best.dollars, p.best.days)) if ok else None  # type: ignore[union-attr]


def sensitivities(request: DesignRequest, at: DesignPoint,
                  parameters: tuple[str, ...] = tuple(p for p in PARAMETERS if p != "price")) -> list[Sensitivity]:
    """Each parameter raised by its step from ``at`` (DeepFlow's finite difference), the best plan found anew;
    ordered by step time gained per unit of price added, the most first (free gains first)."""
    if at.best is None:
        raise ConfigError(f"no plan fits at {at.variation.label}: no sensitivity to compute")
    base = at.best
    out = []
    for name in parameters:
        step = DOMAIN_STEP if name == "scale_up_gpus" else STEP
        factors = dict(at.variation.factors)
        factors[name] = factors.get(name, 1.0) * step
        if name == "scale_up_gpus":  # the next domain must stay inside the next tier
            scale_up_size(request.base.scale_up_domain_gpus, factors[name])
        try:
            point = best_on(request, Variation(factors=tuple(factors.items())), at.gpus)
        except ConfigError:
            continue  # a step the base cannot take (a domain wider than its next tier)
        if point.best is None:
            continue
        new = point.best
        out.append(Sensitivity(
            parameter=name, step=step,
            step_time_change=new.estimate.step_time_s / base.estimate.step_time_s - 1.0,
            price_change=point.cluster.price_per_gpu_hour_usd / at.cluster.price_per_gpu_hour_usd - 1.0,
            cost_change=new.dollars / base.dollars - 1.0,
            energy_change=None if new.energy_j is None or not base.energy_j else new.energy_j / base.energy_j - 1.0,
            plan_changed=_layout(new) != _layout(base)))
    return sorted(out, key=rank)


def rank(s: Sensitivity) -> float:
    """Most step time per unit of price first; a gain at no price before all, no gain at no price after gains."""
    if s.time_per_price is None:
        return -math.inf if s.step_time_change < 0 else 0.0
    return -s.time_per_price


def _layout(point: Point) -> tuple[object, ...]:
    p = point.estimate.plan
    return (p.tp, p.pp, p.cp, p.ep, p.vpp, p.micro_batch, p.global_batch, p.sharding, p.recompute, p.precision)
