"""The DiT kind's entries for ``plait estimate``, ``plait plan``, ``plait simulate`` and ``plait run``: the options
parsed (``--parallel`` into a :class:`~plait.workloads.dit.cost.DitPlan`), the workload priced
(:mod:`plait.workloads.dit.predict`), the result printed."""

from __future__ import annotations

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.plan.defaults import GPUS
from plait.simulate.pipeline import Timeline
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Options, Workload
from plait.workloads.dit.plan import plan_dit
from plait.workloads.dit.predict import parse_dit_plan, predict_dit
from plait.workloads.dit.render import print_dit
from plait.workloads.dit.run import run_dit
from plait.workloads.dit.simulate import dit_timeline
from plait.workloads.timeline import simulate_workload


def estimate(workload: Workload, options: Options) -> None:
    """One plan's step and latency (``--parallel``, else Ulysses over the GPUs)."""
    parallel, gpus = options["parallel"], options["gpus"]
    dit_plan = parse_dit_plan(parallel or f"ulysses={gpus}")
    if dit_plan.gpus != gpus and parallel is not None and gpus != GPUS:
        raise ConfigError(f"--parallel {parallel} uses {dit_plan.gpus} GPUs, not --gpus {gpus}")
    spec, job = workload.description
    dit = predict_dit(spec, job, resolve_cluster(options["cluster"] or DEFAULT_CLUSTER), dit_plan)
    if options["as_json"]:
        print_json(dit.to_dict())
    else:
        print_dit(rich_console(), dit)


def plan(workload: Workload, options: Options) -> None:
    """Every plan of the GPUs, lowest latency first (:mod:`plait.workloads.dit.plan`)."""
    if options["objective"] != "throughput" or options["gpus_range"]:
        raise ConfigError("a DiT (--model with [dit]) is planned for latency on --gpus")
    plan_dit(workload, options["cluster"], options["gpus"], options["memory_margin"], options["as_json"],
             options["export"], options["force"])


def _timeline(workload: Workload, options: Options, cluster: str) -> tuple[Timeline, float, str]:
    dit_plan = parse_dit_plan(options["parallel"] or f"ulysses={options['gpus']}")
    spec, job = workload.description
    dit = predict_dit(spec, job, resolve_cluster(cluster), dit_plan)
    timeline = dit_timeline(dit.job, dit.plan, dit.estimate)
    return timeline, dit.estimate.latency_s, f"generation of {dit.spec.name} ({dit.plan.label()})"


def simulate(workload: Workload, options: Options) -> None:
    """The whole generation, PipeFusion patch by patch (:func:`plait.workloads.dit.simulate.dit_timeline`)."""
    simulate_workload(workload, options, _timeline)


def run(workload: Workload, options: Options) -> None:
    """The plan on CPU ranks beside one process (:func:`plait.workloads.dit.run.run_dit`)."""
    run_dit(workload, options["parallel"], options["gpus"], options["dry_run"])
