"""Simulate one training step of a plan: the pipeline of one data-parallel replica."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.errors import ConfigError
from plait.plan.plan import Plan

if TYPE_CHECKING:
    from plait.cost.prepared import Prepared
    from plait.job import Job
    from plait.simulate.pipeline import Timeline

MAX_PASSES = 1_000_000
"""Most chunk passes (stages x micro-batches x virtual stages) one step's event simulation takes: about 2 s at the
~2 us a pass the kernel takes without recording (Llama 3 8B, pp4 vpp2, 32,768 micro-batches: 131,072 passes in
0.25 s on one core); a bound on the work one estimate may ask for, above published layouts (the development set's
largest, tp8 pp35 vpp3 at 1,120 micro-batches, is 117,600). Above it the closed forms time the pipeline."""


def chunk_passes(plan: Plan) -> int:
    """Forward chunk passes of one step: stages x micro-batches x virtual stages."""
    return plan.pp * plan.num_micro_batches * plan.vpp


def simulate_step(job: Job, *, record: bool = True, prepared: Prepared | None = None) -> Timeline:
    """Per-rank timeline of one optimizer step of ``job`` (all data-parallel replicas behave alike);
    ``record=False`` keeps only the step and per-rank end times (what an estimate needs), a deep pipeline's steady
    state extrapolated as the planner's refinement takes it (:mod:`plait.simulate.steady`); ``prepared``: see
    :func:`plait.simulate.costs.pipeline_costs`. A step of more than :data:`MAX_PASSES` chunk passes is refused."""
    passes = chunk_passes(job.plan)
    if passes > MAX_PASSES:
        raise ConfigError(f"{job.plan.describe()} runs {passes:,} chunk passes a step (pp x micro-batches x vpp); "
                          f"the event simulation takes at most {MAX_PASSES:,} (a smaller global batch, or the closed "
                          "forms: plait estimate --closed-form)")
    # the simulator loads here, where a pipeline is simulated: an estimate without one (pp=1, or past the
    # small-pipeline rule) asks this module only for chunk_passes
    from plait.simulate.costs import pipeline_costs
    from plait.simulate.pipeline import simulate_pipeline

    return simulate_pipeline(pipeline_costs(job, prepared), record, extrapolate=not record)
