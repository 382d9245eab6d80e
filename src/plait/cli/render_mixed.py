"""Tables of mixed-cluster estimates and searches (``plait estimate`` / ``plait plan`` on a mixed cluster)."""

from __future__ import annotations

from rich.console import Console

from plait.predict.mixed_result import MixedEstimate
from plait.search.mixed import MixedSearch
from plait.terminal import titled_table
from plait.units import GIB


def print_mixed_estimate(console: Console, est: MixedEstimate, train_tokens: float | None = None) -> None:
    """The layout, every group's (or stage's) busy and idle time and memory, and the totals."""
    console.print(f"[bold]{est.model_name}[/bold] on {est.cluster_name}")
    console.print(f"layout: {est.plan.describe()}")
    devices = dict.fromkeys(f"{g.group} = {g.accelerator}" + (f" (in {g.precision}: no {est.plan.plan.precision})"
                                                             if g.precision != est.plan.plan.precision else "")
                            for g in est.groups)
    console.print("devices: " + "; ".join(devices))
    table = titled_table(f"{'groups' if est.plan.split == 'data' else 'stages'}: who waits for whom")
    for col in ("group", "GPUs", "work", "busy s", "idle s", "memory GiB", "of GiB", "fits"):
        table.add_column(col)
    for g in est.groups:
        table.add_row(g.group, str(g.num_gpus), g.work, f"{g.busy_s:.3f}", f"{g.idle_s:.3f}",
                      f"{g.memory_bytes / GIB:.1f}", f"{g.capacity_bytes / GIB:.0f}", "yes" if g.fits else "NO")
    console.print(table)
    console.print(f"step {est.step_time_s:.3f} s (set by {est.critical.group}), {est.tokens_per_s:,.0f} tokens/s, "
                  f"MFU {100 * est.mfu:.1f}% of the mixed peaks, ${est.price_per_hour_usd:,.2f}/h, "
                  f"${est.usd_per_million_tokens:.4f} per million tokens")
    if not est.steps_multiplier_known:
        console.print("[yellow]no measured steps multiplier for this synchronization at this many replicas: time "
                      "and cost assume 1 (plait converge measures one)[/yellow]")
    elif est.steps_multiplier != 1.0:
        console.print(f"steps multiplier {est.steps_multiplier:.3g} (the synchronization's, of the group that "
                      "drifts most): time and cost count it")
    if train_tokens:
        days = train_tokens * est.steps_multiplier / est.tokens_per_s / 86400
        console.print(f"{train_tokens:.3g} tokens: {days:.1f} days, ${days * 24 * est.price_per_hour_usd:,.0f}")


def print_mixed_search(console: Console, result: MixedSearch, top: int) -> None:
    """Ranked mixed plans, the even split, and each group alone, with the verdict against the best single group."""
    table = titled_table("mixed plans vs each group alone")
    for col in ("plan", "GPUs", "tokens/s", "steps x", "$/M tokens", "MFU"):
        table.add_column(col)
    for e in result.plans[:top]:
        table.add_row(e.plan.describe(), str(e.plan.num_gpus), f"{e.tokens_per_s:,.0f}", f"{e.steps_multiplier:.3g}",
                      f"{e.usd_per_million_tokens:.4f}", f"{100 * e.mfu:.1f}%")
    if result.even is not None:
        e = result.even
        table.add_row(f"even split: {e.plan.describe()}", str(e.plan.num_gpus), f"{e.tokens_per_s:,.0f}",
                      f"{e.steps_multiplier:.3g}", f"{e.usd_per_million_tokens:.4f}", f"{100 * e.mfu:.1f}%")
    for name, e in result.baselines.items():
        table.add_row(f"{name} alone: {e.plan.describe()}", str(e.num_gpus), f"{e.tokens_per_s:,.0f}",
                      f"{e.steps_multiplier:.3g}", f"{e.cost_usd(1e6):.4f}", f"{100 * e.mfu:.1f}%")
    console.print(table)
    if result.per_tier:
        console.print(f"[bold]per tier[/]: {result.per_tier}")
    best, base = (result.plans[0] if result.plans else None), result.best_baseline
    if best is None:
        console.print("no mixed plan fits every group's memory")
        return
    print_mixed_estimate(console, best)
    if base is not None:
        name, e = base
        faster = best.target_tokens_per_s / e.target_tokens_per_s
        cheaper = e.cost_usd(1e6) / best.usd_per_million_tokens
        console.print(f"vs {name} alone: {faster:.3g}x the all-reduce-equivalent throughput at {1 / cheaper:.3g}x "
                      "the cost per token")
