"""The federated kind's entries for ``plait estimate``, ``plait plan`` and ``plait run``: the options checked, the job
costed (:mod:`.cost`), planned (:mod:`.plan`) or run (:mod:`.run`), the result printed."""

from __future__ import annotations

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Options, Workload
from plait.workloads.federated.cost import round_cost
from plait.workloads.federated.plan import candidate, plan_federated
from plait.workloads.federated.render import print_plan, print_round
from plait.workloads.federated.run import run_federated


def _no_cluster(options: Options) -> None:
    if options.get("cluster") not in (None, DEFAULT_CLUSTER):  # plait plan fills in the default
        raise ConfigError(f"--cluster {options['cluster']}: a federated job's clients and links are its TOML's "
                          "[client]; leave --cluster out")


def estimate(workload: Workload, options: Options) -> None:
    """One round of the description's setting."""
    _no_cluster(options)
    spec = workload.description
    cost = round_cost(spec)
    cand = candidate(spec, cost)
    if options["as_json"]:
        print_json({"model": spec.name} | (cand.to_dict() if cand else cost.to_dict()))
    else:
        print_round(rich_console(), spec, cost, cand)


def plan(workload: Workload, options: Options) -> None:
    """Method, local steps and participation ranked by time (or energy) to the target loss."""
    _no_cluster(options)
    objective = options["objective"]
    if objective not in ("throughput", "time", "energy") or options["gpus_range"] or options["export"] is not None:
        raise ConfigError(f"--objective {objective}: a federated job is planned by time (throughput, time) or the "
                          "clients' energy (energy) to its target loss, without --gpus-range or --export")
    result = plan_federated(workload.description, "energy" if objective == "energy" else "time")
    if options["as_json"]:
        print_json(result.to_dict())
    else:
        print_plan(rich_console(), workload.description, result, options["top"])


def run(workload: Workload, options: Options) -> None:
    """PFLEGO and FedAvg on gloo ranks beside one process (``--steps``: rounds)."""
    run_federated(workload.description, options["steps"], options["dry_run"], options.get("cluster"))
