"""``plait plan --model GNN.toml``: every GNN training strategy and feature-cache size, ranked."""

from __future__ import annotations

from rich.console import Console

from plait.cli.output import print_json
from plait.cli.render_gnn import print_gnn, print_gnn_search
from plait.predict.gnn import search_gnn


def plan_gnn(model: str, cluster: str, gpus: int, global_batch: int, memory_margin: float, as_json: bool) -> None:
    """Rank the exact strategies that fit by step time; show the winner's step, the approximate strategies beside
    (not ranked) and why the refused are refused."""
    ranked, approximate, refused = search_gnn(model, cluster, gpus, global_batch, memory_margin=memory_margin)
    if as_json:
        print_json({"ranked": [r.to_dict() for r in ranked], "approximate": [r.to_dict() for r in approximate],
                    "refused": [{"strategy": label, "why": why} for label, why in refused]})
        return
    console = Console()
    if ranked:
        print_gnn(console, ranked[0])
    print_gnn_search(console, ranked, approximate, refused)
