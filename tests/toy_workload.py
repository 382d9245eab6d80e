"""A toy workload kind, defined outside plait, for :mod:`tests.test_workload_plugins`: ``samples`` independent
examples of ``flops_per_sample`` FLOPs each, split evenly over the GPUs, with no communication. A TOML file with a
``[toy]`` table describes it; the kind prices it at the accelerator's bf16 peak (exact, hand-computable)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.hardware.cluster import Cluster
from plait.schema import build
from plait.simulate.pipeline import Timeline
from plait.strict_json import print_json
from plait.workload.files import toml_describes
from plait.workloads import Options, Workload, WorkloadKind
from plait.workloads.timeline import simulate_workload


@dataclass(frozen=True, kw_only=True)
class ToyModel:
    """The toy workload."""

    name: str
    """What the tables call it."""
    flops_per_sample: float
    """FLOPs of one example (forward and backward)."""


def is_toy_file(name: str | None) -> bool:
    return toml_describes(name, lambda data: "toy" in data)


def read_toy(name: str | None) -> ToyModel:
    data = tomllib.loads(Path(str(name)).read_text())
    return build(ToyModel, data["toy"], f"{name}: [toy]")


def step_s(model: ToyModel, cluster: Cluster, gpus: int, global_batch: int) -> float:
    """One step: each GPU's share of the batch at the bf16 peak."""
    if gpus < 1 or global_batch % gpus:
        raise ConfigError(f"--gpus={gpus} must divide --global-batch={global_batch}")
    return global_batch // gpus * model.flops_per_sample / cluster.accelerator.peak_flops("bf16")


def estimate(workload: Workload, options: Options) -> None:
    cluster = resolve_cluster(options["cluster"] or DEFAULT_CLUSTER)
    print_json({"model": workload.description.name, "gpus": options["gpus"],
                "step_time_s": step_s(workload.description, cluster, options["gpus"], options["global_batch"])})


def plan(workload: Workload, options: Options) -> None:
    """Every GPU count up to ``--gpus`` that divides the batch, fastest first."""
    cluster, batch = resolve_cluster(options["cluster"]), int(options["global_batch"])
    ranked = sorted((step_s(workload.description, cluster, g, batch), g) for g in range(1, options["gpus"] + 1)
                    if batch % g == 0)
    print_json({"ranked": [{"gpus": g, "step_time_s": s} for s, g in ranked]})


def _timeline(workload: Workload, options: Options, cluster: str) -> tuple[Timeline, float, str]:
    gpus = options["gpus"]
    seconds = step_s(workload.description, resolve_cluster(cluster), gpus, options["global_batch"])
    timeline = Timeline(step_time_s=seconds)
    for rank in range(gpus):
        timeline.add(rank, "compute", "toy", 0.0, seconds)
    return timeline, seconds, f"step of {workload.description.name}"


def simulate(workload: Workload, options: Options) -> None:
    simulate_workload(workload, options, _timeline)


KIND = WorkloadKind(name="toy", label="toy", recognises=is_toy_file, read=read_toy, estimate=estimate, plan=plan,
                    simulate=simulate)
