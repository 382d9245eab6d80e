"""Tables of a GNN job: one strategy's step, and the search over strategies and cache sizes."""

from __future__ import annotations

from rich.console import Console

from plait.terminal import titled_table
from plait.units import GIB
from plait.workloads.gnn.predict import APART, GnnPrediction

PARTS = (("sampling", "sampling_s"), ("feature fetch", "fetch_s"), ("compute", "compute_s"),
         ("gradient all-reduce", "all_reduce_s"), ("optimizer", "optimizer_s"), ("server correction", "correction_s"))


def describe(result: GnnPrediction) -> str:
    est = result.estimate
    text = est.strategy + (f", cache {result.cache_fraction:.0%}" if result.cache_fraction else "")
    text += f", {result.sampler.label()} sampler" if result.sampler.kind != "loop" else ""
    if est.strategy == "partition_local":
        text += f" (drops the {result.edge_cut:.0%} of edges that cross parts)"
    if est.strategy == "full_graph":
        text += " (one update per epoch)"
    if est.strategy == "llcg":
        text += " (local steps, averaged, server-corrected)"
    loop = result.spec.loop
    if loop.loader:  # the step is the loader's: its workers beside the trainer (feed.py)
        text += f", fed by {loop.loader} ({loop.workers} workers asked; sampling and fetch on the host)"
    return text


def print_gnn(console: Console, result: GnnPrediction) -> None:
    """The step's parts, the batch's size and the memory per GPU."""
    est, sampled = result.estimate, result.estimate.batch
    console.print(f"{result.spec.name} on {result.world} x {result.cluster.accelerator.name} ({result.cluster.name}), "
                  f"{result.batch} seeds per rank, {describe(result)}; edge cut {result.edge_cut:.3f}")
    table = titled_table("one step")
    table.add_column("part")
    table.add_column("ms", justify="right")
    for label, attr in PARTS:
        table.add_row(label, f"{1e3 * getattr(est, attr):.3f}")
    if est.synchronized_sampling:  # the phases in turn: the dispatch is the training's floor (compute.py)
        table.add_row("host dispatch (the training's floor)", f"{1e3 * est.host_s:.3f}")
        table.add_row("loop synchronizations", f"{1e3 * est.loop_sync_s:.3f}")
    else:
        table.add_row("host dispatch (the step's floor)", f"{1e3 * est.host_s:.3f}")
    table.add_row("step", f"{1e3 * est.step_s:.3f}")
    console.print(table)
    if sampled is not None:
        hops = " + ".join(f"{n:,.0f}" for n in sampled.new_nodes)
        console.print(f"batch ({result.library}'s sampler): {sampled.nodes:,.0f} nodes ({hops} by hop), "
                      f"{sampled.sampled_edges:,.0f} sampled edges; {sum(sampled.remote_nodes):,.0f} held by other "
                      f"ranks, {sampled.remote_misses:,.0f} fetched; {est.fetch_bytes / 1e6:.2f} MB of features "
                      f"moved per rank")
    console.print(f"epoch: {est.steps_per_epoch:,} steps, {est.epoch_s:.2f} s; memory {est.memory_bytes / GIB:.2f} GiB "
                  f"per GPU of {result.cluster.accelerator.memory_bytes / GIB:.0f}")
    for note in result.notes:
        console.print(f"note: {note}", markup=False)  # "[loop]" is text, not a style


def print_gnn_search(console: Console, ranked: list[GnnPrediction], approximate: list[GnnPrediction],
                     refused: list[tuple[str, str]]) -> None:
    """The exact strategies that fit, fastest first, with what the winner's step is made of; the approximate ones
    beside (they train on less of the graph); the refused."""
    table = titled_table("strategies, fastest epoch first")
    for col in ("strategy", "step ms", "epoch s", "fetch ms", "compute ms", "GiB"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for r in [*ranked, *approximate]:
        est = r.estimate
        label = describe(r) if r in ranked else f"not ranked: {describe(r)}"
        table.add_row(label, f"{1e3 * est.step_s:.3f}", f"{est.epoch_s:.2f}", f"{1e3 * est.fetch_s:.3f}",
                      f"{1e3 * est.compute_s:.3f}", f"{est.memory_bytes / GIB:.2f}")
    console.print(table)
    if ranked:
        best = ranked[0].estimate
        # the host's dispatch is the step's floor: a host-bound step is mostly dispatch, not its largest device part
        part = max((*PARTS, ("host dispatch", "host_s")), key=lambda p: getattr(best, p[1]))
        console.print(f"winner: {describe(ranked[0])}; its step is mostly {part[0]} "
                      f"({getattr(best, part[1]) / best.step_s:.0%})")
    for r in approximate:
        console.print(f"not ranked: {r.estimate.strategy} {APART[r.estimate.strategy]}; its accuracy is not modelled")
    for label, why in refused:
        console.print(f"refused: {label}: {why}")
