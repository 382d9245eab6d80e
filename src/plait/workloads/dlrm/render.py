"""Tables of a DLRM job: its placement and each rank's share of a step."""

from __future__ import annotations

from rich.console import Console

from plait.terminal import titled_table
from plait.units import GIB
from plait.workloads.dlrm.predict import DlrmPrediction, placements_text


def print_dlrm(console: Console, result: DlrmPrediction, title: str | None = None) -> None:
    """The placement, the step and the per-rank balance (the slowest rank sets the step)."""
    est = result.estimate
    console.print(title or f"{result.spec.name} on {result.world} x {result.cluster.accelerator.name} "
                           f"({result.cluster.name}), {result.batch} samples per rank, tables placed by "
                           f"{result.chosen_by}")
    console.print(f"step {1e3 * est.step_s:.3f} ms = slowest rank {1e3 * max(est.rank_time_s):.3f} ms + dense MLPs "
                  f"{1e3 * est.dense_s:.3f} ms; {result.batch * result.world / est.step_s:,.0f} samples/s; peak "
                  f"{est.max_memory_bytes / GIB:.2f} GiB per GPU")
    table = titled_table("per rank")
    for col in ("rank", "tables", "lookups ms", "all-to-all ms", "all-reduce ms", "time ms", "memory GiB"):
        table.add_column(col, justify="left" if col == "tables" else "right")
    slowest = max(range(len(est.rank_time_s)), key=est.rank_time_s.__getitem__)
    for r, load in enumerate(result.loads):
        mark = " <" if r == slowest else ""
        table.add_row(f"{r}{mark}", ", ".join(load.tables) or "-", f"{1e3 * est.rank_lookup_s[r]:.3f}",
                      f"{1e3 * est.rank_all_to_all_s[r]:.3f}", f"{1e3 * est.rank_reduce_s[r]:.3f}",
                      f"{1e3 * est.rank_time_s[r]:.3f}", f"{est.rank_memory_bytes[r] / GIB:.2f}")
    console.print(table)
    console.print(f"placements: {placements_text(result.placements)}")
