"""``plait converge``: train the reference model under each synchronization method and under the all-reduce on
local gloo ranks (:mod:`plait.run.converge`; asynchronous methods on workers and server ranks,
:mod:`plait.run.async_train`), and read off each method's steps multiplier
(:func:`plait.plan.convergence.matching_multiplier`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.plan.convergence import matching_multiplier
from plait.run.launch import run_worker
from plait.run.workload_configs import LEARNING_RATES, AsyncConfig, ConvergeConfig
from plait.sync import parse
from plait.workload.catalog import resolve_model


@dataclass(frozen=True, kw_only=True)
class Multipliers:
    """Each method's measured steps multiplier against the all-reduce."""

    window: int
    """Steps averaged to compare losses."""
    rows: list[dict[str, Any]]
    """One per method: its losses, the all-reduce's, the steps to match, the multiplier and the bytes per step."""


def measure_multipliers(dp_sync: list[str], steps: int, model: str, ranks: int, batch: int, optimizer: str,
                        window: int, say: Callable[[str], None] | None, cluster: str = "") -> Multipliers:
    """Check the options, run every method and the all-reduce from the same weights on the same batches, and
    compare; ``say`` (``None``: quiet) hears what starts. ``cluster``: a cluster preset or file whose sites the
    ranks are laid out on (``""``: one site)."""
    specs = [parse(s).spec for s in dp_sync]
    window = _check(steps, ranks, batch, optimizer, window)
    for method in (parse(s) for s in specs):
        if (batch // ranks) % method.learners:  # Crossbow: each learner an equal share of the rank's rows
            raise ConfigError(f"dp_sync={method.stated!r}: learners={method.learners} must divide the "
                              f"{batch // ranks} sequences of each rank (batch={batch} over ranks={ranks})")
    resolve_model(model)  # a bad model fails here, in one line, not in every rank
    if cluster:
        resolve_cluster(cluster)  # a bad cluster fails here, in one line
    curves = _curves(specs, steps, model, ranks, batch, optimizer, say, cluster)
    reference = curves[f"allreduce@{optimizer}"]["losses"]
    rows = []
    for spec in specs:
        losses = curves[f"{spec}@{optimizer}"]["losses"]
        multiplier, match = matching_multiplier(losses, reference, window)
        rows.append({"dp_sync": spec, "steps": steps, "window": window, "initial_loss": sum(losses[:window]) / window,
                     "final_loss": sum(losses[-window:]) / window,
                     "allreduce_final_loss": sum(reference[-window:]) / window, "allreduce_steps_to_match": match,
                     "multiplier": multiplier, "bytes_per_step": sum(curves[f"{spec}@{optimizer}"]["bytes"]) / steps,
                     "allreduce_bytes_per_step": sum(curves[f"allreduce@{optimizer}"]["bytes"]) / steps})
    return Multipliers(window=window, rows=rows)


def _check(steps: int, ranks: int, batch: int, optimizer: str, window: int) -> int:
    """The options' checks; the window (0: a tenth of the steps)."""
    if optimizer not in LEARNING_RATES:
        raise ConfigError(f"optimizer={optimizer!r} must be one of {', '.join(LEARNING_RATES)}")
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be >= 2 (a method needs replicas to synchronize)")
    if batch <= 0 or batch % ranks:
        raise ConfigError(f"batch={batch} must be a positive multiple of ranks={ranks}")
    if steps < 2:
        raise ConfigError(f"steps={steps} must be >= 2")
    window = window or max(1, steps // 10)
    if not 1 <= window <= steps:
        raise ConfigError(f"window={window} must be in [1, steps={steps}]")
    return window


def _curves(specs: list[str], steps: int, model: str, ranks: int, batch: int, optimizer: str,
            say: Callable[[str], None] | None, cluster: str = "") -> dict[str, dict[str, list[float]]]:
    """Loss and bytes per step of every case ``METHOD@OPTIMIZER``, the all-reduce's included."""
    waiting = [s for s in specs if not parse(s).server_ranks]  # the others: workers and server ranks
    cases = [f"{s}@{optimizer}" for s in dict.fromkeys(["allreduce", *waiting])]
    if say is not None:
        say(f"{len(cases)} runs of {steps} steps on {ranks} ranks")
    config = ConvergeConfig(out=Path("unused"), model=model, steps=steps, batch=batch, cluster=cluster,
                            cases=tuple(cases))
    curves = run_worker("plait.run.converge", ranks, config)  # a failure names its rank and log
    for spec in (s for s in specs if s not in waiting):  # workers and server ranks: plait.run.async_train
        curves[f"{spec}@{optimizer}"] = _asynchronous_curve(spec, model, steps, ranks, batch, optimizer, say)
    return curves  # type: ignore[no-any-return]


def _asynchronous_curve(spec: str, model: str, steps: int, ranks: int, batch: int, optimizer: str,
                        say: Callable[[str], None] | None) -> dict[str, list[float]]:
    """Loss per step (the mean of the workers' losses at each iteration) and bytes per step of an asynchronous
    method over ``ranks`` workers and its server ranks."""
    world = ranks + parse(spec).server_ranks
    if say is not None:
        say(f"{spec} on {ranks} workers and {world - ranks} server ranks")
    config = AsyncConfig(out=Path("unused"), model=model, spec=(spec,), steps=steps, batch=batch,
                         optimizer=optimizer)  # type: ignore[arg-type]
    workers = run_worker("plait.run.async_train", world, config)[spec]["workers"]
    losses = [sum(w["losses"][t] for w in workers) / len(workers) for t in range(steps)]
    return {"losses": losses, "bytes": workers[0]["bytes"]}
