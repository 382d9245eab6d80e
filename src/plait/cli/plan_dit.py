"""``plait plan --model DIT.toml``: every way to spend the GPUs on a diffusion transformer, lowest latency first
(issue 18)."""

from __future__ import annotations

from rich.console import Console

from plait.cli.output import print_json
from plait.cli.render_dit import print_dit, print_dit_search
from plait.predict.dit import search_dit


def plan_dit(model: str, cluster: str, gpus: int, memory_margin: float, as_json: bool) -> None:
    ranked, refused = search_dit(model, cluster, gpus, memory_margin)
    if as_json:
        print_json({"ranked": [r.to_dict() for r in ranked],
                    "refused": [{"plan": plan.label(), "why": why} for plan, why in refused]})
        return
    console = Console()
    if ranked:
        print_dit(console, ranked[0])
    print_dit_search(console, ranked, refused)
