"""Simulate one training step of a plan: the pipeline of one data-parallel replica."""

from __future__ import annotations

from plait.cost.batch import Prepared
from plait.job import Job
from plait.simulate.costs import pipeline_costs
from plait.simulate.pipeline import Timeline, simulate_pipeline


def simulate_step(job: Job, *, record: bool = True, prepared: Prepared | None = None) -> Timeline:
    """Per-rank timeline of one optimizer step of ``job`` (all data-parallel replicas behave alike);
    ``record=False`` keeps only the step and per-rank end times (what an estimate needs); ``prepared``: see
    :func:`plait.simulate.costs.pipeline_costs`."""
    return simulate_pipeline(pipeline_costs(job, prepared), record)
