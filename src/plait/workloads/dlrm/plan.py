"""``plait plan --model DLRM.toml``: place a recommendation model's tables, next to TorchRec's own planner."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from plait.errors import ConfigError, MissingExtra, check_export_folder, require_extra
from plait.hardware.catalog import resolve_cluster
from plait.strict_json import print_json
from plait.terminal import rich_console, titled_table
from plait.units import GIB
from plait.workloads import Workload
from plait.workloads.dlrm.model import DlrmSpec
from plait.workloads.dlrm.predict import DlrmPrediction, parse_placements, placements_text, predict_dlrm
from plait.workloads.dlrm.render import print_dlrm
from plait.workloads.dlrm.torchrec import plan_json, sharding_plan, torchrec_placements

EXPORTS = ("torchrec_plan.json", "placements.txt")


def plan_dlrm(workload: Workload, cluster: str, gpus: int, global_batch: int, memory_margin: float, export: Path | None,
              force: bool, as_json: bool) -> None:
    """plait's placement with its per-rank balance; TorchRec's ``EmbeddingShardingPlanner`` on the same tables and
    topology, costed by the same model, with its own estimate beside; ``export``: plait's plan as TorchRec's
    ``ShardingPlan`` (JSON) and as ``--placements`` text."""
    if export is not None:  # TorchRec's ShardingPlan is built by TorchRec: refused before the search if absent
        require_extra("recsys", "plait plan --export of a DLRM")
        check_export_folder(export, EXPORTS, force)
    spec: DlrmSpec = workload.description
    ours = predict_dlrm(spec, resolve_cluster(cluster), gpus, global_batch, memory_margin=memory_margin)
    theirs, their_estimate, why_not = _torchrec(gpus, global_batch, ours)
    if export is not None:
        export.mkdir(parents=True, exist_ok=True)
        plan = sharding_plan(ours.spec, ours.placements, gpus, min(ours.cluster.gpus_per_node, gpus))
        (export / "torchrec_plan.json").write_text(json.dumps(plan_json(plan), indent=1) + "\n")
        (export / "placements.txt").write_text(placements_text(ours.placements) + "\n")
    if as_json:
        print_json({"plait": ours.to_dict(), "torchrec": theirs.to_dict() if theirs else None,
                    "torchrec_own_estimate_per_rank": their_estimate, "torchrec_unavailable": why_not})
        return
    console = rich_console()
    print_dlrm(console, ours)
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


def _torchrec(gpus: int, global_batch: int, ours: DlrmPrediction) -> tuple[DlrmPrediction | None, list[float] | None, str | None]:
    """TorchRec planner's placement costed by plait, its own per-rank estimate, or why it did not run."""
    try:
        placed, own = torchrec_placements(ours.spec, gpus, min(ours.cluster.gpus_per_node, gpus), ours.batch,
                                          ours.cluster.accelerator.memory_bytes)
    except ImportError as error:
        missing = (getattr(error, "name", None) or "torchrec").split(".")[0]
        return None, None, str(MissingExtra("TorchRec's planner", "recsys", missing))
    except ConfigError as error:
        return None, None, str(error)
    given = parse_placements(placements_text(placed), ours.spec, gpus)  # as --placements would give them
    theirs = predict_dlrm(ours.spec, ours.cluster, gpus, global_batch, placements=given)
    return DlrmPrediction(**{**theirs.__dict__, "chosen_by": "torchrec"}), own, None
