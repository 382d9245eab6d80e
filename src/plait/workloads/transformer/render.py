"""Tables and JSON for the transformer kind's ``plait plan``; no computation happens here."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from plait.cost.estimate import Estimate
from plait.search.adaptive import site_verdict
from plait.search.chunks import chunk_verdict
from plait.search.explain import Relaxation, bottleneck, runner_up_gives_up, why_winner
from plait.search.pareto import Point
from plait.search.per_stage import StageWin
from plait.search.runner import SearchResult
from plait.search.tp_grids import grid_verdict
from plait.terminal import titled_table
from plait.units import GIB


def print_search(console: Console, result: SearchResult, top: int) -> None:
    """Counts, infeasibility reasons, the ranked plans and why the winner wins."""
    console.print(f"searched {result.num_candidates:,} candidate plans in {result.elapsed_s:.2f} s "
                  f"({result.candidates_per_s:,.0f}/s); {result.costed:,} costed, {result.num_feasible:,} feasible"
                  + (" [bold yellow](interrupted: best found so far)[/]" if result.interrupted else ""))
    reasons = titled_table("infeasible candidates by reason")
    reasons.add_column("reason")
    reasons.add_column("count", justify="right")
    for reason, count in result.reasons.most_common():
        reasons.add_row(reason, f"{count:,}")
    console.print(reasons)
    best = result.top(top)
    if not best:
        return
    methods = any(not e.plan.dp_sync.is_allreduce for e in best)  # ranked by time-to-target: show the multiplier
    table = titled_table(f"top {len(best)} plans on {result.space.gpus} GPUs"
                         + (" by time-to-target (step time x steps multiplier)" if methods else ""))
    columns = ("#", "layout", "step s", *(("steps x",) if methods else ()), "tokens/s", "MFU", "headroom GiB",
               "bottleneck")
    for col in columns:
        table.add_column(col, justify="left" if col in ("layout", "bottleneck") else "right")
    for rank, est in enumerate(best, 1):
        multiplier = (f"{est.steps_multiplier:.3g}",) if methods else ()
        table.add_row(str(rank), est.plan.describe(), f"{est.step_time_s:.3f}", *multiplier, f"{est.tokens_per_s:,.0f}",
                      f"{100 * est.mfu:.1f}%", f"{est.memory.headroom_bytes / GIB:.1f}", bottleneck(est))
    console.print(table)
    for spec, figure in {e.plan.dp_sync.spec: e.convergence for e in best if not e.plan.dp_sync.is_allreduce}.items():
        console.print(f"steps multiplier of {spec}: {figure.multiplier:.3g} ({figure.basis}: {figure.source})")
    console.print(f"[bold]why #1[/]: {why_winner(best[0])}")
    if len(best) > 1:
        console.print(f"[bold]runner-up[/]: {runner_up_gives_up(best[0], best[1])}")
    verdict = site_verdict(result)
    if verdict:
        console.print(f"[bold]per tier[/]: {verdict}")
    chunked = chunk_verdict(result.model, result.cluster, result.engine, best[0])
    if chunked:
        console.print(f"[bold]chunked overlap[/]: {chunked.text()}")

    grids = grid_verdict(result)
    if grids:
        console.print(f"[bold]tp grids[/]: {grids}")


def print_per_stage(console: Console, wins: list[StageWin], best: Estimate, cpu_s: float) -> None:
    """The per-stage plans that beat a uniform pipeline (:mod:`plait.search.per_stage`), with their gain, and
    whether the fastest beats the search's #1."""
    if not wins:
        console.print(f"[bold]per stage[/]: no per-stage recomputation or layer split beats its uniform pipeline "
                      f"({cpu_s:.2f} s CPU)")
        return
    for win in wins:
        layout = escape(win.better.plan.describe())  # stages[19s,21n]: text, not markup
        console.print(f"[bold]per stage[/]: {layout} {win.better.tokens_per_s:,.0f} tokens/s vs "
                      f"{win.uniform.tokens_per_s:,.0f} uniform ({100 * win.gain:+.1f}%; headroom "
                      f"{win.better.memory.headroom_bytes / GIB:.1f} GiB)")
    lead = wins[0].better.target_tokens_per_s / best.target_tokens_per_s - 1.0
    verdict = "[bold green]beats #1[/]" if lead > 0 else "does not beat #1"
    console.print(f"per stage: the fastest {verdict} ({100 * lead:+.1f}%); {cpu_s:.2f} s CPU; plait's runtime runs "
                  "it (plait run), the engines' exports do not state a mode per stage")


def per_stage_json(wins: list[StageWin], best: list[Estimate], cpu_s: float) -> dict[str, object]:
    """``plait plan --json``'s ``per_stage``: each per-stage plan that wins, the uniform one it beats, the gain, and
    whether the fastest beats the search's #1."""
    beats = bool(wins and best and wins[0].better.target_tokens_per_s > best[0].target_tokens_per_s)
    return {"cpu_s": cpu_s, "beats_top": beats, "wins": [{"plan": w.better.plan.to_dict(), "layout": w.better.plan.describe(),
                                      "step_time_s": w.better.step_time_s, "uniform_layout": w.uniform.plan.describe(),
                                      "uniform_step_time_s": w.uniform.step_time_s, "gain": w.gain,
                                      "tokens_per_s": w.better.tokens_per_s,
                                      "memory_total_bytes": w.better.memory.total_bytes} for w in wins]}


def print_relaxations(console: Console, result: SearchResult, relaxations: list[Relaxation]) -> None:
    """What would make an infeasible request work."""
    console.print("[bold red]no plan fits[/]: nothing satisfies the request")
    for miss in result.nearest_misses(1):
        over = (miss.memory.total_bytes - miss.memory.capacity_bytes * (1 - result.space.memory_margin)) / GIB
        console.print(f"closest: {miss.plan.describe()} needs {miss.memory.total_bytes / GIB:.1f} GiB "
                      f"({over:.1f} GiB over the limit)")
    for relaxation in relaxations:
        if relaxation.best:
            est = relaxation.best
            console.print(f"  {relaxation.change}: works, best {est.plan.describe()} at "
                          f"{est.tokens_per_s:,.0f} tokens/s")
        else:
            console.print(f"  {relaxation.change}: still nothing fits")


def print_points(console: Console, points: list[Point], front: list[Point], choice: Point, tokens: float) -> None:
    """Best plan per GPU count, the Pareto front and the choice."""
    table = titled_table(f"training {tokens:.3g} tokens: best plan per GPU count (days, cost and energy with failures, "
                         "checkpoints and restarts: plait.predict.goodput)")
    for col in ("GPUs", "layout", "tokens/s", "days", "cost $", "MWh", "Pareto"):
        table.add_column(col, justify="left" if col == "layout" else "right")
    on_front = {p.gpus for p in front}
    for p in points:
        mark = "*" if p.gpus in on_front else ""
        style = "bold" if p is choice else None
        table.add_row(str(p.gpus), p.estimate.plan.describe(), f"{p.estimate.tokens_per_s:,.0f}", f"{p.days:.1f}",
                      f"{p.dollars:,.0f}", "-" if p.energy_j is None else _mwh(p.energy_j), mark,
                      style=style)
    console.print(table)
    console.print(f"[bold]choice[/]: {choice.gpus} GPUs, {choice.estimate.plan.describe()}: {choice.days:.1f} days, "
                  f"${choice.dollars:,.0f}"
                  + ("" if choice.energy_j is None else f", {_mwh(choice.energy_j)} MWh"))


def _chunk_text(result: SearchResult, best: Estimate) -> str | None:
    verdict = chunk_verdict(result.model, result.cluster, result.engine, best)
    return verdict.text() if verdict else None


def _mwh(joules: float) -> str:
    """Megawatt-hours, four significant digits below 1,000, whole ones above (no exponent)."""
    mwh = joules / 3.6e9
    return f"{mwh:,.0f}" if mwh >= 1000 else f"{mwh:.4g}"



def search_json(result, best, fixes) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """``plait plan --json`` for one GPU count: the counts, the ranked plans, why the winner wins, relaxations."""
    return {
        "objective": "throughput", "rank_by": result.rank_by, "model": result.model.name, "cluster": result.cluster.name,
        "engine": result.engine.spec,
        "gpus": result.space.gpus, "candidates": result.num_candidates, "costed": result.costed,
        "feasible": result.num_feasible, "elapsed_s": result.elapsed_s, "candidates_per_s": result.candidates_per_s,
        "interrupted": result.interrupted, "infeasible_by_reason": dict(result.reasons),
        "top": [{**e.to_dict(), "bottleneck": max(e.time.items(), key=lambda i: i[1])[0]} for e in best],
        "why": why_winner(best[0]) if best else None,
        "runner_up": runner_up_gives_up(best[0], best[1]) if len(best) > 1 else None,
        "per_tier": site_verdict(result) if best else None,
        "chunked_overlap": _chunk_text(result, best[0]) if best else None,
        "tp_grids": grid_verdict(result) if best else None,
        "relaxations": [{"change": r.change, "works": r.best is not None,
                         "best": r.best.plan.describe() if r.best else None} for r in fixes],
    }
