"""The DLRM kind's entries for ``plait estimate``, ``plait plan`` and ``plait run``: the options parsed, the
workload priced (:mod:`plait.workloads.dlrm.predict`), the result printed."""

from __future__ import annotations

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.search.planner import parse_batches
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Options, Workload
from plait.workloads.dlrm.plan import plan_dlrm
from plait.workloads.dlrm.predict import DlrmPrediction, parse_placements, predict_dlrm
from plait.workloads.dlrm.render import print_dlrm
from plait.workloads.dlrm.run import check_torchrec, run_dlrm


def predict(workload: Workload, cluster: str, gpus: int, global_batch: int, group: int | None = None,
            placements: str | None = None, memory_margin: float = 0.05) -> DlrmPrediction:
    """:func:`predict_dlrm` of the options' text: ``placements`` parsed here, at the edge."""
    spec, hardware = workload.description, resolve_cluster(cluster)
    placed = parse_placements(placements, spec, group or gpus) if placements else None  # text parsed at the edge
    return predict_dlrm(spec, hardware, gpus, global_batch, group, placed, memory_margin)


def estimate(workload: Workload, options: Options) -> None:
    """One placement (given, else plait's planner's) and its per-rank step."""
    dlrm = predict(workload, options["cluster"] or DEFAULT_CLUSTER, options["gpus"], options["global_batch"],
                   options["sparse_group"], options["placements"])
    if options["as_json"]:
        print_json(dlrm.to_dict())
    else:
        print_dlrm(rich_console(), dlrm)


def plan(workload: Workload, options: Options) -> None:
    """plait's placement beside TorchRec's planner (:mod:`plait.workloads.dlrm.plan`)."""
    batches = parse_batches(options["global_batch"])
    if options["objective"] != "throughput" or options["gpus_range"] or len(batches) != 1:
        raise ConfigError("a DLRM (--model with [[tables]]) is planned for throughput on --gpus at one --global-batch")
    plan_dlrm(workload, options["cluster"], options["gpus"], batches[0], options["memory_margin"], options["export"],
              options["force"], options["as_json"])


def run(workload: Workload, options: Options) -> None:
    """Train the placement on TorchRec's ranks (:mod:`plait.workloads.dlrm.run`)."""
    if options["optimizer"] not in ("sgd", "rowwise_adagrad"):
        raise ConfigError(f"--optimizer={options['optimizer']!r} must be sgd or rowwise_adagrad")
    check_torchrec()
    predicted = predict(workload, options["cluster"] or "dgx-a100-ib", options["gpus"], options["global_batch"],
                        options["sparse_group"], options["placements"])
    run_dlrm(str(workload.source), predicted, options["steps"], options["optimizer"], options["dry_run"])
