"""The GNN kind's entries for ``plait estimate``, ``plait plan``, ``plait simulate`` and ``plait run``: the options
parsed, the workload priced (:mod:`plait.workloads.gnn.predict`), the result printed."""

from __future__ import annotations

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.search.planner import parse_batches
from plait.simulate.pipeline import Timeline
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Options, Workload
from plait.workloads.gnn.plan import plan_gnn
from plait.workloads.gnn.predict import GnnPrediction, predict_gnn
from plait.workloads.gnn.render import print_gnn
from plait.workloads.gnn.run import run_gnn
from plait.workloads.gnn.sampler import LOOP, parse_sampler
from plait.workloads.gnn.simulate import gnn_timeline
from plait.workloads.timeline import simulate_workload


def predict(workload: Workload, cluster: str, gpus: int, global_batch: int, strategy: str = "sampled_dp",
            edge_cut: float | None = None, cache_fraction: float = 0.0, library: str = "",
            sampler: str = "loop") -> GnnPrediction:
    """:func:`predict_gnn` of the options' text: ``sampler`` (:func:`plait.workloads.gnn.sampler.parse_sampler`'s text)
    parsed here, at the edge."""
    chosen = parse_sampler(sampler)
    if chosen != LOOP and strategy not in ("sampled_dp", "host_features", "replicated"):
        how = "trains on the whole graph" if strategy == "full_graph" else "samples inside each part"
        raise ConfigError(f"--gnn-sampler {sampler}: the {strategy} strategy {how}; the "
                          f"{chosen.kind} sampler serves sampled_dp, host_features and replicated")
    return predict_gnn(workload.description, resolve_cluster(cluster), gpus, global_batch, strategy, edge_cut,
                       cache_fraction, library, chosen)


def estimate(workload: Workload, options: Options) -> None:
    """One strategy's step and epoch."""
    gnn = predict(workload, options["cluster"] or DEFAULT_CLUSTER, options["gpus"], options["global_batch"],
                  options["gnn_strategy"], options["edge_cut"], options["cache_fraction"], options["gnn_library"],
                  options["gnn_sampler"])
    if options["as_json"]:
        print_json(gnn.to_dict())
    else:
        print_gnn(rich_console(), gnn)


def plan(workload: Workload, options: Options) -> None:
    """Every strategy and cache size, ranked (:mod:`plait.workloads.gnn.plan`)."""
    batches = parse_batches(options["global_batch"])
    if (options["objective"] != "throughput" or options["gpus_range"] or len(batches) != 1
            or options["export"] is not None):
        raise ConfigError("a GNN (--model with [graph] and [model]) is planned for throughput on --gpus at one "
                          "--global-batch, without --export")
    plan_gnn(workload, options["cluster"], options["gpus"], batches[0], options["memory_margin"], options["as_json"])


def _timeline(workload: Workload, options: Options, cluster: str) -> tuple[Timeline, float, str]:
    strategy, gpus = options["gnn_strategy"], options["gpus"]
    gnn = predict(workload, cluster, gpus, options["global_batch"], strategy)
    return gnn_timeline(gnn.estimate, gpus), gnn.estimate.step_s, f"step of {gnn.spec.name} ({strategy})"


def simulate(workload: Workload, options: Options) -> None:
    """A step, phase by phase (:func:`plait.workloads.gnn.simulate.gnn_timeline`)."""
    simulate_workload(workload, options, _timeline)


def run(workload: Workload, options: Options) -> None:
    """The strategy on CPU ranks beside one process (:func:`plait.workloads.gnn.run.run_gnn`)."""
    run_gnn(workload, options["gpus"], options["global_batch"], options["steps"], options["cache_fraction"],
            options["dry_run"], options["gnn_strategy"], options["gnn_sampler"])
