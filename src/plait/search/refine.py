"""The planner's best plans re-timed by the event simulation, simulating only the plans that can still rank.

:meth:`plait.search.runner.SearchResult.top` re-times the best ``REFINE x k`` plans of the closed-form ranking by
the event simulation (:func:`plait.predict.estimate.assemble` with ``simulate=True``) and keeps the ``k`` fastest.
A simulation of a deep pipeline with many micro-batches takes ~0.1 s (98,304 chunk passes), so simulating all of
them cost more than the search itself. Here each plan is first bounded from below without the sweep
(:func:`step_lower_bound_s`, from the same per-rank durations the simulation takes); a plan whose best possible
re-timed throughput is already below the ``k``-th best re-timed so far cannot be among the ``k`` and is left out;
one still above it is first swept through its warm-up and first period (:func:`plait.simulate.pipeline.warmed`,
where the extrapolated sweep starts anyway) and bounded again from there, which catches the warm-up idle time of an
uneven first or last stage; one that stays is simulated on from that state.
The plans kept, their order and their figures are those of simulating every one (a plan left out would have sorted
below ``k`` others), so the answer is unchanged; only the simulations that could not matter are skipped.
The simulations taken are cheap: a deep pipeline's steady state is extrapolated once it repeats
(:mod:`plait.simulate.steady`: the figures equal a replay of every period up to rounding, ~1e-13 of the step), and
pipelines alike in every operation's duration (plans that differ past the pipeline, e.g. in the optimizer's
placement) are swept once.
"""

from __future__ import annotations

from collections.abc import Iterable

from plait.cost.batch import BatchResult
from plait.cost.estimate import Estimate
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.convergence import averaging_replicas, convergence
from plait.predict.estimate import assemble, wants_simulation
from plait.simulate.costs import pipeline_costs
from plait.simulate.pipeline import PipelineCosts, SweepKey, Swept, simulate_pipeline, warmed
from plait.workload.model import ModelSpec

ROUNDING = 1e-9
"""Relative slack on the bound: the simulation and the estimate's sum of components add in another order than the
bound does (float rounding, ~1e-16 per addition), so the bound is lowered by this much to stay below them."""


def step_lower_bound_s(c: PipelineCosts, ends: list[float] | None = None) -> float:
    """A lower bound on the step time :func:`plait.simulate.pipeline.simulate_pipeline` gives for ``c``.

    Every rank's first operation is the forward of micro-batch 0 through its first chunk (global stage ``r``), which
    waits for that activation from rank ``r - 1``: rank ``r`` starts no earlier than ``sum over q < r of (forward_q +
    p2p)``. It then runs its ``m x v`` forwards and backwards (ZB-H1: the backward split into B and W, the same work)
    one after another, so its pipeline ends no earlier than that start plus ``m x v x (forward_r + backward_r)``.
    Outside ZB-H1 (whose ranks end on a W), a rank's last operation is the backward of its last micro-batch through
    its first chunk (:mod:`plait.simulate.schedules`; interleaved: ``m`` a multiple of ``p``), whose gradient rank
    ``r - 1`` then takes through its own first chunk: rank ``r - 1`` ends no earlier than rank ``r``'s end plus
    ``p2p + backward_(r-1)``. After the pipeline each rank runs the data-parallel tail as the simulation does
    (``_data_parallel``): outside ZB-H1 its gradient reduction ends no earlier than ``reduce`` after its last
    backward starts and ``reduce / buckets`` after it ends (all of it after the end, without overlap), then the
    exposed parameter gather and the optimizer step. The step is the slowest rank's end. Every step is monotone in
    the times before it, so bounds on those give a bound on the step. For uniform stages under 1F1B without a
    data-parallel tail this is the simulated step, ``(m + p - 1)(f + b)`` plus the hops and the optimizer
    (Narayanan et al. 2021, Sec. 2.2.1). ``ends``: lower bounds on every rank's end of the pipeline known besides
    (:func:`plait.simulate.pipeline.warmed`: its warm-up swept, the rest of its operations one after another), each
    rank's taken as the larger of the two; the rest follows from them as above."""
    start, known, ends = 0.0, ends, []
    for r in range(c.p):
        ends.append(start + c.m * c.v * (c.forward_s[r] + c.backward_s[r]))
        start += c.forward_s[r] + c.p2p_s
        if known is not None:
            ends[r] = max(ends[r], known[r])
    ends_on_backward = c.schedule != "zb-h1" and (c.schedule != "interleaved" or c.v == 1 or c.m % c.p == 0)
    if ends_on_backward:
        for r in range(c.p - 1, 0, -1):
            ends[r - 1] = max(ends[r - 1], ends[r] + c.p2p_s + c.backward_s[r - 1])
    bound = 0.0
    for r, end in enumerate(ends):
        finish, reduce = end, c.grad_reduce_s[r]
        if ends_on_backward and reduce > 0:
            if c.overlap_grad_reduce:
                finish = max(end, end - c.backward_s[r] + reduce, end + reduce / max(c.buckets[r], 1))
            else:
                finish = end + reduce
        gather = c.param_gather_s[r]
        if gather > 0:
            finish += gather if not c.overlap_grad_reduce else max(0.0, gather - c.forward_s[r])
        bound = max(bound, finish + c.optimizer_s[r])
    return bound * (1.0 - ROUNDING)


def refine(model: ModelSpec, cluster: Cluster, engine: Engine, rows: Iterable[tuple[BatchResult, int]],
           k: int) -> list[Estimate]:
    """The estimates of ``rows`` (costed plans, best first by the closed forms) that can be among the ``k`` fastest
    once re-timed by the simulation, each re-timed as :func:`plait.predict.estimate.assemble` with ``simulate=True``
    does, in the order of ``rows``; plans past the simulation's bound or without a pipeline are taken as assembled.
    The pipelines are simulated highest bound first, so the ``k``-th best rises as early as it can and the first
    bound below it ends the simulations. The caller ranks them and keeps ``k``: the same ``k`` as from every row
    re-timed (module docstring)."""
    done: list[tuple[int, Estimate]] = []  # (place in rows, estimate)
    pending: list[tuple[float, int, Job, BatchResult, int, PipelineCosts, float]] = []
    for place, (result, row) in enumerate(rows):
        job = Job.checked(model, cluster, result.cols.plan(row), engine)
        if not wants_simulation(job.plan, True):
            done.append((place, assemble(job, result, row, simulate=True)))
            continue
        costs, plan = pipeline_costs(job, result.prepared), job.plan
        # tokens and steps multiplier as assemble gives them (plait.cost.step.estimate_from_batch), without the
        # rest of an estimate: a batch row has no input wait (its loader is not costed, plait.cost.batch)
        multiplier = convergence(plan.dp_sync, averaging_replicas(plan.dp, plan.dp_replicate, plan.sharding)).factor
        scale = plan.global_batch * plan.seq_len / multiplier  # all-reduce-equivalent tokens per step
        pending.append((scale / step_lower_bound_s(costs), place, job, result, row, costs, scale))
    swept: dict[SweepKey, Swept] = {}  # pipelines alike in every operation's duration: swept once
    for bound, place, job, result, row, costs, scale in sorted(pending, key=lambda p: (-p[0], p[1])):
        kth = sorted((e.target_tokens_per_s for _, e in done), reverse=True)[k - 1] if len(done) >= k else None
        if kth is not None and bound < kth:
            break  # this plan and every one after it (lower bounds) re-time below k others
        warm = warmed(costs, swept) if kth is not None else None  # the sweep's start, which it goes on from
        if warm is not None and scale / step_lower_bound_s(costs, warm[1]) < kth:  # type: ignore[operator]
            continue  # below k others by the finer bound (later plans may still rank: their bounds are coarser)
        timeline = simulate_pipeline(costs, record=False, extrapolate=True, swept=swept,
                                     warm=None if warm is None else warm[0])
        done.append((place, assemble(job, result, row, simulate=True, timeline=timeline)))
    return [e for _, e in sorted(done, key=lambda d: d[0])]
