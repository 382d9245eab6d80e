"""``plait plan --model GNN.toml``: every GNN training strategy and feature-cache size, ranked."""

from __future__ import annotations

from plait.hardware.catalog import resolve_cluster
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Workload
from plait.workloads.gnn.predict import search_gnn
from plait.workloads.gnn.render import print_gnn, print_gnn_search


def plan_gnn(workload: Workload, cluster: str, gpus: int, global_batch: int, memory_margin: float,
             as_json: bool) -> None:
    """Rank the exact strategies that fit by step time; show the winner's step, the approximate strategies beside
    (not ranked) and why the refused are refused."""
    ranked, approximate, refused = search_gnn(workload.description, resolve_cluster(cluster), gpus, global_batch,
                                              memory_margin=memory_margin)
    if as_json:
        print_json({"ranked": [r.to_dict() for r in ranked], "approximate": [r.to_dict() for r in approximate],
                    "refused": [{"strategy": label, "why": why} for label, why in refused]})
        return
    console = rich_console()
    if ranked:
        print_gnn(console, ranked[0])
    print_gnn_search(console, ranked, approximate, refused)
