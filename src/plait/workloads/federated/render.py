"""Tables of a federated round (``plait estimate``) and of a federated plan (``plait plan``)."""

from __future__ import annotations

from rich.console import Console

from plait.terminal import titled_table
from plait.workloads.federated.cost import RoundCost
from plait.workloads.federated.model import FederatedSpec
from plait.workloads.federated.plan import Candidate, FederatedPlan


def print_round(console: Console, spec: FederatedSpec, cost: RoundCost, found: Candidate | None) -> None:
    """One round's compute, bytes, time and energy, and its time to the target loss where a multiplier exists."""
    f, c = spec.federation, spec.client
    table = titled_table(f"{spec.name}: one {cost.method} round, {cost.participants} of {f.clients} clients, "
                         f"{cost.local_steps} local steps, clients on {c.accelerator} ({c.dtype})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [("client compute", f"{cost.client_flops:.3g} FLOP, {cost.compute_s:.4g} s"),
            ("download per client", f"{cost.download_bytes:,} B"), ("upload per client", f"{cost.upload_bytes:,} B"),
            ("client transfers", f"{cost.link_s:.4g} s"), ("median client", f"{cost.client_s:.4g} s"),
            ("slowest client / median", f"{cost.slowest_factor:.3f}"),
            ("round", f"{cost.round_s:.4g} s" + (f" (deadline; {cost.kept_fraction:.1%} of clients in time)"
                                                 if cost.kept_fraction < 1 else "")),
            ("energy per client", f"{cost.client_energy_j:.4g} J (board)"),
            ("energy per round", f"{cost.round_energy_j:.4g} J (all selected clients)")]
    if found is not None:
        rows.append(("to the target loss", f"{found.rounds} rounds, {found.time_to_loss_s:.4g} s, "
                                           f"{found.energy_to_loss_j:.4g} J"))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if found is None:
        console.print("no rounds-to-loss figure at this setting ([[rounds_to_loss]]): time to loss unknown "
                      "(python -m plait.workloads.federated.converge measures the toy's)", markup=False)


def print_plan(console: Console, spec: FederatedSpec, plan: FederatedPlan, top: int) -> None:
    """The best candidates and the count of the others by reason."""
    table = titled_table(f"{spec.name}: settings by {plan.objective} to loss {plan.target_loss}")
    for col in ("method", "local steps", "participation", "rounds", "round s", "to loss s", "to loss J",
                "down+up B/client"):
        table.add_column(col, justify="right")
    for cand in plan.ranked[:top]:
        c = cand.cost
        table.add_row(c.method, str(c.local_steps), f"{c.participation:g}", str(cand.rounds), f"{c.round_s:.4g}",
                      f"{cand.time_to_loss_s:.4g}", f"{cand.energy_to_loss_j:.4g}",
                      f"{c.download_bytes + c.upload_bytes:,}")
    console.print(table)
    for reason, count in plan.infeasible.items():
        console.print(f"not ranked: {count} ({reason})", markup=False)
