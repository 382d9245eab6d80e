"""``plait estimate --backend``: the check and the line that compares the step with the cluster's own collectives."""

from __future__ import annotations

from typing import Any

from plait.cost.estimate import Estimate
from plait.engine.backends import backend_facts
from plait.errors import ConfigError


def check_backend(name: str, priced_by_job: bool) -> None:
    """Refuse an unknown back-end, and one for a workload whose estimate does not go through a transformer job."""
    backend_facts(name)
    if not priced_by_job:
        raise ConfigError(f"--backend {name}: only a transformer plan on one cluster takes a collective back-end "
                          "(other kinds and mixed clusters are priced as their runtimes run them); leave --backend out")


def backend_json(name: str, result: Estimate, own: Estimate) -> dict[str, Any]:
    """The back-end's step beside the cluster's own, for ``--json``."""
    return {"name": name, "title": backend_facts(name).title, "step_time_s": result.step_time_s,
            "own_step_time_s": own.step_time_s, "change": result.step_time_s / own.step_time_s - 1}


def backend_line(name: str, result: Estimate, own: Estimate) -> str:
    """One line: the step on ``name`` against the cluster's own collectives."""
    change = result.step_time_s / own.step_time_s - 1
    return (f"collectives on {backend_facts(name).title}: step {result.step_time_s:.4g} s against "
            f"{own.step_time_s:.4g} s on the cluster's own ({change:+.1%}); figures and sources: "
            "src/plait/engine/data/backends.toml")
