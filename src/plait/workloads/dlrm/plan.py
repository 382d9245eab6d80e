"""``plait plan --model DLRM.toml``: place a recommendation model's tables, next to TorchRec's own planner."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rich.console import Console

from plait.errors import ConfigError, MissingExtra, check_export_folder, require_extra
from plait.hardware.catalog import resolve_cluster
from plait.strict_json import print_json
from plait.terminal import rich_console, titled_table
from plait.units import GIB
from plait.workloads import Workload
from plait.workloads.dlrm.fused import best_chunks
from plait.workloads.dlrm.groups import GroupOption, explain, search_groups
from plait.workloads.dlrm.model import DlrmSpec
from plait.workloads.dlrm.predict import DlrmPrediction, parse_placements, placements_text, predict_dlrm
from plait.workloads.dlrm.render import print_dlrm
from plait.workloads.dlrm.torchrec import plan_json, sharding_plan, torchrec_placements

EXPORTS = ("torchrec_plan.json", "placements.txt", "run_command.txt")


def plan_dlrm(workload: Workload, cluster: str, gpus: int, global_batch: int, memory_margin: float, export: Path | None,
              force: bool, as_json: bool) -> None:
    """plait's placement within the best 2D sparse group size (:mod:`plait.workloads.dlrm.groups`) with its
    per-rank balance; TorchRec's ``EmbeddingShardingPlanner`` on the same tables and
    topology, costed by the same model, with its own estimate beside; ``export``: plait's plan as TorchRec's
    ``ShardingPlan`` (JSON, for one group's ranks), as ``--placements`` text and as the ``plait run`` command with
    its ``--sparse-group``."""
    if export is not None:  # TorchRec's ShardingPlan is built by TorchRec: refused before the search if absent
        require_extra("recsys", "plait plan --export of a DLRM")
        check_export_folder(export, EXPORTS, force)
    spec: DlrmSpec = workload.description
    ranked = search_groups(spec, resolve_cluster(cluster), gpus, global_batch, memory_margin)
    if ranked[0].prediction is None:
        raise ConfigError(explain(ranked))
    ours = ranked[0].prediction
    theirs, their_estimate, why_not = _torchrec(gpus, global_batch, ours)
    if export is not None:  # TorchRec's plan for one group's ranks, as DMPCollection takes it
        export.mkdir(parents=True, exist_ok=True)
        plan = sharding_plan(ours.spec, ours.placements, ours.group, min(ours.cluster.gpus_per_node, ours.group))
        (export / "torchrec_plan.json").write_text(json.dumps(plan_json(plan), indent=1) + "\n")
        (export / "placements.txt").write_text(placements_text(ours.placements) + "\n")
        (export / "run_command.txt").write_text(_run_command(workload, ours) + "\n")
    if as_json:
        print_json({"plait": ours.to_dict(), "fused_lookups": best_chunks(ours).text(), "sparse_groups": [o.to_dict() for o in ranked],
                    "torchrec": theirs.to_dict() if theirs else None,
                    "torchrec_own_estimate_per_rank": their_estimate, "torchrec_unavailable": why_not})
        return
    console = rich_console()
    _print_groups(console, ranked)
    print_dlrm(console, ours)
    console.print(f"[bold]fused lookups[/]: {best_chunks(ours).text()}")
    console.print(f"run it: {_run_command(workload, ours)}")
    if theirs is None:
        console.print(f"TorchRec's planner not run: {why_not}")
        return
    table = titled_table("plait's placement vs TorchRec's planner (both costed by plait's model)")
    for col in ("planner", "slowest rank ms", "step ms", "peak GiB", "TorchRec's own estimate", "sharding types"):
        table.add_column(col, justify="left" if col in ("planner", "sharding types") else "right")
    for label, result, own in (("plait", ours, "-"), ("torchrec", theirs, f"{max(their_estimate):.3f}")):
        kinds = ", ".join(f"{k} {v}" for k, v in Counter(p.sharding for p in result.placements).most_common())
        table.add_row(label, f"{1e3 * max(result.estimate.rank_time_s):.3f}", f"{1e3 * result.estimate.step_s:.3f}",
                      f"{result.estimate.max_memory_bytes / GIB:.2f}", own, kinds)
    console.print(table)
    console.print("TorchRec's own estimate is the slowest rank's sum of its shards' perf.total (its unit); TorchRec "
                  "prices each sharding type by its own constants and spreads tables for memory first, plait by the "
                  "step its model predicts")
    if export is not None:
        console.print(f"wrote {', '.join(str(export / n) for n in EXPORTS)}")


def _run_command(workload: Workload, ours: DlrmPrediction) -> str:
    """The ``plait run`` command that trains ``ours`` (its group size and placements)."""
    group = f" --sparse-group {ours.group}" if ours.group < ours.world else ""
    return (f"plait run --model {workload.source} --gpus {ours.world} --global-batch {ours.batch * ours.world}{group} "
            f"--placements {placements_text(ours.placements)}")


def _print_groups(console: Console, ranked: list[GroupOption]) -> None:
    """The searched 2D sparse group sizes, best first, and why the winner wins."""
    table = titled_table("2D sparse groups (000-09): tables sharded within each group, groups averaged each step")
    for col in ("group", "replicas", "step ms", "peak GiB", "refused"):
        table.add_column(col, justify="left" if col == "refused" else "right")
    for o in ranked:
        est = o.prediction.estimate if o.prediction else None
        table.add_row(str(o.group), str(o.replicas), f"{1e3 * est.step_s:.3f}" if est else "-",
                      f"{est.max_memory_bytes / GIB:.2f}" if est else "-", o.refusal or "")
    console.print(table)
    console.print(explain(ranked))


def _torchrec(gpus: int, global_batch: int, ours: DlrmPrediction) -> tuple[DlrmPrediction | None, list[float] | None, str | None]:
    """TorchRec planner's placement within the same group size (its plan for one group's ranks, as DMPCollection
    takes it) costed by plait, its own per-rank estimate, or why it did not run."""
    group = ours.group
    try:
        placed, own = torchrec_placements(ours.spec, group, min(ours.cluster.gpus_per_node, group), ours.batch,
                                          ours.cluster.accelerator.memory_bytes)
    except ImportError as error:
        missing = (getattr(error, "name", None) or "torchrec").split(".")[0]
        return None, None, str(MissingExtra("TorchRec's planner", "recsys", missing))
    except ConfigError as error:
        return None, None, str(error)
    given = parse_placements(placements_text(placed), ours.spec, group)  # as --placements would give them
    theirs = predict_dlrm(ours.spec, ours.cluster, gpus, global_batch, group, placements=given)
    return DlrmPrediction(**{**theirs.__dict__, "chosen_by": "torchrec"}), own, None
