"""One estimate of a traced workload: the module traced (:mod:`plait.workloads.traced.tracing`), then costed
(:mod:`plait.workloads.traced.cost`)."""

from __future__ import annotations

from dataclasses import replace

from plait.cost.estimate import Estimate
from plait.cost.input_pipeline import Loader, get_loader
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.predict.intervals import step_interval_s
from plait.workloads.traced.cost import TracedRunFacts, estimate_traced
from plait.workloads.traced.model import Shape, TracedWorkload


def parse_shape(text: str | None) -> Shape | None:
    """``3,224,224`` as a shape; one-line errors name the value and the rule."""
    if text is None:
        return None
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--input-shape={text!r} must be positive whole numbers joined by commas") from None
    if not shape or min(shape) <= 0:
        raise ConfigError(f"--input-shape={text!r} must be positive whole numbers joined by commas")
    return shape


def parse_loader(text: str | None) -> Loader | None:
    """``--loader KIND[:workers=N]`` as a packaged loader (:mod:`plait.cost.input_pipeline`); one-line errors."""
    if text is None:
        return None
    kind, _, rest = text.partition(":")
    workers = None
    if rest:
        key, _, value = rest.partition("=")
        if key != "workers" or not value.isdigit() or int(value) < 1:
            raise ConfigError(f"--loader {text!r}: the only option is workers=N, N a whole number >= 1 (loader "
                              "workers per GPU)")
        workers = int(value)
    return get_loader(kind, workers)


def predict_traced(work: TracedWorkload, cluster: Cluster, plan: Plan, engine: Engine, loader: Loader | None = None,
                   channels_last: bool = False) -> Estimate:
    """The estimate of ``plan`` for the traced module ``work`` on ``cluster`` under ``engine`` (warned where the
    catalog resolved the engine's name), fed by ``loader`` (none: the input is ready on the device), its
    convolutions channels-last or not."""
    est = estimate_traced(work, cluster, plan, engine, step_interval_s,
                          TracedRunFacts(loader=loader, channels_last=channels_last))
    return replace(est, warnings=[*est.warnings, engine.resolved]) if engine.resolved else est
