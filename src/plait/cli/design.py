"""``plait design``: the best plan on a grid of hypothetical hardware, the cheapest point that meets a deadline, and
the step time's sensitivity to each hardware parameter (:mod:`plait.search.design`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from plait.cli.numbers import count, quantity
from plait.cli.options import DEFAULT_CLUSTER, DEFAULT_MODEL, ClusterOption, JsonOption, ModelOption, TokensOption
from plait.cli.output import print_json
from plait.engine.choice import choose_engine
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.hardware.variation import HYPOTHETICAL, PARAMETERS, default_price_shares
from plait.search.design import (
    DesignPoint,
    DesignRequest,
    Sensitivity,
    cheapest,
    grid,
    parse_values,
    search_grid,
    sensitivities,
)
from plait.search.planner import parse_batches
from plait.terminal import rich_console, titled_table
from plait.workload.catalog import resolve_model


def design_command(
    model: ModelOption = None,
    cluster: ClusterOption = None,
    engine: Annotated[str | None, typer.Option(help="Engine plans are ranked for. [default: as plait plan]")] = None,
    gpus: Annotated[str, typer.Option(help="GPU counts to try at every hardware point: N or N,M,...")] = "1024",
    global_batch: Annotated[str, typer.Option(help="Sequences per step: N, N,M,... or LOW:HIGH.")] = "512",
    seq_len: Annotated[int, count("Tokens per sequence (0: the model's).", low=0)] = 0,
    tokens: TokensOption = 15e12,
    deadline_days: Annotated[float | None, quantity("Train the tokens within this many days: the cheapest point "
                                                    "that does is chosen.")] = None,
    vary: Annotated[list[str] | None, typer.Option(help=f"PARAM=F1,F2,...: factors of the base cluster's figure to "
                                                        f"try (1 = the base); repeat for a grid. PARAM: "
                                                        f"{', '.join(PARAMETERS)}.")] = None,
    price_share: Annotated[list[str] | None, typer.Option(help="PARAM=X: the share of the price per GPU-hour that "
                                                               "scales with PARAM (replaces design.toml's assumed "
                                                               "share); repeat for more.")] = None,
    sensitivity: Annotated[bool, typer.Option(help="The step time's change with each parameter +10% (the scale-up "
                                                   "domain x2) at the chosen point.")] = True,
    as_json: JsonOption = False,
) -> None:
    """Search hypothetical hardware: the best plan on each point of a grid of variations of --cluster, the cheapest
    point that trains --tokens within --deadline-days, and where the next dollar helps most."""
    base = resolve_cluster(cluster or DEFAULT_CLUSTER)
    shares = {name: fig.value for name, fig in default_price_shares().items()}
    shares.update(_shares(price_share or []))
    request = DesignRequest(model=resolve_model(model or DEFAULT_MODEL), base=base,
                            engine=choose_engine(engine, base), gpus=_counts(gpus), global_batches=parse_batches(global_batch),
                            tokens=tokens, shares=shares, seq_len=seq_len)
    points = search_grid(request, grid([parse_values(v) for v in vary or []]))
    choice = cheapest(points, deadline_days)
    sens = sensitivities(request, choice) if sensitivity and choice is not None else []
    if as_json:
        print_json(_json(points, choice, sens, shares, deadline_days))
        return
    _print(rich_console(), request, points, choice, sens, deadline_days)


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(dict.fromkeys(int(x) for x in text.split(",")))
    except ValueError:
        raise ConfigError(f"--gpus {text!r} must be N or N,M,...") from None
    if not counts or min(counts) < 1:
        raise ConfigError(f"--gpus {text!r} must name positive GPU counts")
    return counts


def _shares(texts: list[str]) -> dict[str, float]:
    out = {}
    for text in texts:
        name, _, value = text.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if name not in PARAMETERS or name == "price" or not 0.0 <= share <= 10.0:
            raise ConfigError(f"--price-share {text!r} must be PARAM=X with PARAM one of "
                              f"{', '.join(p for p in PARAMETERS if p != 'price')} and 0 <= X <= 10")
        out[name] = share
    return out


def _print(console: Console, request: DesignRequest, points: list[DesignPoint], choice: DesignPoint | None,
           sens: list[Sensitivity], deadline_days: float | None) -> None:
    console.print(f"{HYPOTHETICAL} hardware: variations of {request.base.name}; {request.model.name} on "
                  f"{', '.join(map(str, request.gpus))} GPUs, {request.tokens:.3g} tokens. Prices of varied points are assumed "
                  "(design.toml's price shares, --price-share); only the base point is a catalog cluster.")
    console.print(f"base price ${request.base.price_per_gpu_hour_usd:.2f}/GPU-hour: {request.base.price_source}")
    console.print("price shares (each scales linearly with its parameter): " + ", ".join(
        f"{name} {share:g}" for name, share in request.shares.items()))
    table = titled_table("Best plan per hardware point")
    for column in ("hardware", "GPUs", "$/GPU-h", "step s", "plan", "days", "$ to train", "MWh"):
        table.add_column(column, justify="left" if column in ("hardware", "plan") else "right")
    for p in points:
        label = f"{HYPOTHETICAL}: {p.variation.label}" if p.hypothetical else "base (catalog)"
        if p.best is None:
            table.add_row(label, str(p.gpus), f"{p.cluster.price_per_gpu_hour_usd:.2f}", "-", f"nothing fits: {p.infeasible}",
                          "-", "-", "-")
            continue
        table.add_row(label, str(p.gpus), f"{p.cluster.price_per_gpu_hour_usd:.2f}", f"{p.best.estimate.step_time_s:.4g}",
                      p.best.estimate.plan.describe(), f"{p.best.days:.1f}", f"{p.best.dollars:,.0f}",
                      "-" if p.best.energy_j is None else f"{p.best.energy_j / 3.6e9:,.0f}")
    console.print(table)
    within = f" within {deadline_days:g} days" if deadline_days is not None else ""
    if choice is None or choice.best is None:
        console.print(f"no hardware point trains the tokens{within}")
        return
    tag = (f"{HYPOTHETICAL}: {choice.variation.label}" if choice.hypothetical else "the base cluster") + \
        f" on {choice.gpus} GPUs"
    console.print(f"cheapest{within}: {tag}, {choice.best.days:.1f} days, ${choice.best.dollars:,.0f}")
    if not sens:
        return
    table = titled_table(f"Sensitivity at {tag} ({HYPOTHETICAL} +10% each; most step time per price first)")
    for column in ("parameter", "step", "step time", "elasticity", "price", "$ to train", "energy", "new plan"):
        table.add_column(column, justify="left" if column == "parameter" else "right")
    for s in sens:
        table.add_row(s.parameter, f"x{s.step:g}", f"{s.step_time_change:+.2%}", f"{s.elasticity:+.2f}",
                      f"{s.price_change:+.2%}", f"{s.cost_change:+.2%}",
                      "-" if s.energy_change is None else f"{s.energy_change:+.2%}", "yes" if s.plan_changed else "no")
    console.print(table)


def _point_json(p: DesignPoint) -> dict[str, Any]:
    out: dict[str, Any] = {"hardware": p.variation.label, "hypothetical": p.hypothetical, "gpus": p.gpus,
                           "factors": dict(p.variation.factors), "cluster": p.cluster.name,
                           "price_per_gpu_hour_usd": p.cluster.price_per_gpu_hour_usd,
                           "price_source": p.cluster.price_source}
    if p.best is None:
        return {**out, "feasible": False, "reason": p.infeasible}
    return {**out, "feasible": True, "step_time_s": p.best.estimate.step_time_s,
            "plan": p.best.estimate.plan.describe(), "days": p.best.days, "dollars": p.best.dollars,
            "energy_j": p.best.energy_j}


def _json(points: list[DesignPoint], choice: DesignPoint | None, sens: list[Sensitivity], shares: dict[str, float],
          deadline_days: float | None) -> dict[str, Any]:
    sources = {name: fig.source for name, fig in default_price_shares().items()}
    return {"hypothetical_hardware": True, "price_shares": shares,
            "price_share_sources": {name: sources.get(name, "given with --price-share") for name in shares},
            "deadline_days": deadline_days,
            "points": [_point_json(p) for p in points],
            "cheapest": None if choice is None else _point_json(choice),
            "sensitivity": [{"parameter": s.parameter, "step": s.step, "step_time_change": s.step_time_change,
                             "elasticity": s.elasticity, "price_change": s.price_change,
                             "cost_change": s.cost_change, "energy_change": s.energy_change,
                             "plan_changed": s.plan_changed} for s in sens]}
