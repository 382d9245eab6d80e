"""The GLM kind's entries for ``plait estimate``, ``plait plan`` and ``plait run``: the options checked, the job
priced and planned (:mod:`.predict`), the result printed. The batch is the TOML's ``batch``: a ``--global-batch``
given is warned about (it has no effect)."""

from __future__ import annotations

from rich.console import Console

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.plan.defaults import GLOBAL_BATCH
from plait.strict_json import print_json
from plait.terminal import rich_console, titled_table
from plait.workloads import Options, Workload
from plait.workloads.glm.predict import GlmPlan, plan_glm

PLAN_GLOBAL_BATCH = "128"
"""``plait plan``'s default ``--global-batch`` (text: it takes lists and ranges)."""
RUN_GLOBAL_BATCH = 8
"""``plait run``'s default ``--global-batch``."""


def _plan(workload: Workload, options: Options) -> GlmPlan:
    return plan_glm(workload.description, resolve_cluster(options["cluster"] or DEFAULT_CLUSTER), options["gpus"])


def _warnings(options: Options, default: object) -> list[str]:
    """Options given that have no effect on a GLM (STYLE.md rule 11: warn)."""
    if options.get("global_batch", default) != default:
        return [f"--global-batch {options['global_batch']} has no effect on a GLM: its batch is the TOML's [glm].batch"]
    return []


def _output(options: Options, doc: dict[str, object], shown: GlmPlan, top: int, default: object) -> None:
    notes = _warnings(options, default)
    if options["as_json"]:
        print_json({**doc, "warnings": notes})
        return
    console = rich_console()
    _print(console, shown, top)
    for note in notes:
        console.print(f"warning: {note}", markup=False)


def _print(console: Console, plan: GlmPlan, top: int) -> None:
    spec = plan.spec
    table = titled_table(f"{spec.name}: {spec.loss} GLM, {spec.samples:,} x {spec.features:,} (density "
                         f"{spec.density:g}), batch {spec.batch}, {plan.best.ranks} ranks of {plan.cluster}")
    for column in ("method", "micro-batches", "step us", "forward us", "all-reduce us", "backward us",
                   "sent B/step", "epoch s", "GiB/rank"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for cost in plan.ranked[:top]:
        table.add_row(cost.method, str(cost.micro_batches), f"{cost.step_s * 1e6:.1f}", f"{cost.forward_s * 1e6:.1f}",
                      f"{cost.comm_s * 1e6:.1f}", f"{cost.backward_s * 1e6:.1f}", f"{cost.sent_bytes:,.0f}",
                      f"{cost.epoch_s:.3g}", f"{cost.memory_bytes / 2**30:.2f}")
    console.print(table)
    console.print(f"chosen: {plan.reason}", markup=False)


def estimate(workload: Workload, options: Options) -> None:
    """Each method's fastest pipeline depth, and the choice."""
    plan = _plan(workload, options)
    best = plan.per_method()
    shown = GlmPlan(spec=plan.spec, cluster=plan.cluster, ranked=tuple(best), refused=plan.refused, reason=plan.reason)
    _output(options, plan.to_dict(), shown, len(best), GLOBAL_BATCH)


def plan(workload: Workload, options: Options) -> None:
    """Every candidate ranked, the refused counted by reason (:func:`plan_glm`)."""
    if options["objective"] != "throughput" or options["gpus_range"] or options["export"] is not None:
        raise ConfigError("a GLM (--model with [glm]) is planned for throughput on --gpus, without --export")
    found = _plan(workload, options)
    doc = {**found.to_dict(), "ranked": [{"method": c.method, "micro_batches": c.micro_batches, "step_s": c.step_s}
                                         for c in found.ranked]}
    _output(options, doc, found, options.get("top") or 10, PLAN_GLOBAL_BATCH)


def run(workload: Workload, options: Options) -> None:
    """Data-parallel and feature-partitioned SGD and coordinate descent on CPU ranks (:mod:`.run`)."""
    from plait.workloads.glm.run import run_glm  # torch: only plait run needs it

    for note in _warnings(options, RUN_GLOBAL_BATCH):
        rich_console().print(f"warning: {note}", markup=False)
    run_glm(workload.description, options["gpus"], options["steps"], options["dry_run"], options.get("cluster"))
