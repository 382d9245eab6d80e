"""One estimate of a traced workload: the module traced (:mod:`plait.workload.tracing`), then costed
(:mod:`plait.cost.traced`)."""

from __future__ import annotations

from plait.cost.estimate import Estimate
from plait.cost.traced import estimate_traced
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.predict.intervals import step_interval_s
from plait.plan.plan import Plan
from plait.workload.traced import Shape
from plait.workload.tracing import trace


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


def predict_traced(model: str, cluster: str, plan: Plan, engine: str | None = None, input_shape: Shape | None = None,
                   input_dtype: str | None = None) -> Estimate:
    """The estimate of ``plan`` for the module factory ``model`` (``module:attr``) on ``cluster`` (preset or file)."""
    work = trace(model, input_shape, input_dtype)
    return estimate_traced(work, resolve_cluster(cluster), plan, get_engine(engine or DEFAULT_ENGINE), step_interval_s)
