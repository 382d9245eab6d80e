"""``plait run --model FEDERATED.toml``: the toy federation on this machine's CPU ranks (one server, ``[run].clients``
clients; :mod:`.worker`), PFLEGO and FedAvg, beside the same federation in one process (:func:`.toy.federate`).

Printed per method: the rounds until the clients' objective first fell to ``[run].target_loss`` on the ranks and in
one process, the largest loss difference between them, the bytes each client received and sent per round against
:func:`plait.workloads.federated.cost.transfer_bytes`, and for PFLEGO the largest difference between the gradient
the server applied and the gradient of the clients' whole objective at the round's weights (autograd over every
client's loss in one graph): PFLEGO's exact-SGD property, zero up to float rounding with every client selected
(``[run].participation = 1``; with fewer, the step is the objective's gradient only in expectation, not shown).
With ``--cluster`` (``plait calibrate``'s description of this machine), each method's round, measured by the server
(the median after the warm-up, :func:`plait.run.steady.steady_s`, and its CPU seconds) beside the round predicted on
those ranks and their loopback (:func:`.loopback.loopback_round`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.run.launch import run_worker
from plait.run.preflight import check_cpu_machine
from plait.run.steady import WARMUP_STEPS, steady_s
from plait.terminal import rich_console, titled_table
from plait.workloads.federated.config import FederatedRunConfig
from plait.workloads.federated.cost import shapes, transfer_bytes
from plait.workloads.federated.loopback import loopback_round
from plait.workloads.federated.model import METHODS, FederatedSpec, Method

WORKER = "plait.workloads.federated.worker"


def run_config(spec: FederatedSpec, rounds: int, participation: float | None = None) -> FederatedRunConfig:
    """The ranks' configuration of the description's toy (its model, samples and local steps, ``[run]``'s clients,
    step sizes and seed); refuses what the toy cannot run."""
    f, m, r = spec.federation, spec.model, spec.run
    if f.batch != f.samples_per_client:
        raise ConfigError(f"[federated].batch={f.batch}: plait run's toy takes full-batch steps (PFLEGO's): batch "
                          f"must equal samples_per_client={f.samples_per_client}")
    if f.bytes_per_value != 4:
        raise ConfigError(f"[federated].bytes_per_value={f.bytes_per_value}: plait run's toy sends fp32 (4)")
    if rounds < 1:
        raise ConfigError(f"--steps={rounds} (rounds) must be >= 1")
    return FederatedRunConfig(methods=METHODS, clients=r.clients,
                              participation=r.participation if participation is None else participation,
                              local_steps=f.local_steps, rounds=rounds, samples=f.samples_per_client, inputs=m.inputs,
                              body=m.body, classes=m.classes, lr=r.lr, head_lr=r.head_lr, seed=r.seed,
                              out=Path("unused"))


def rounds_to(losses: list[float], target: float) -> int | None:
    """Rounds until the objective first fell to ``target`` (``losses[r]``: at round ``r``'s start); ``None``: never."""
    return next((r for r, loss in enumerate(losses) if loss <= target), None)


def compare(spec: FederatedSpec, ranks: dict[str, Any], single: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per method: rounds to the target loss (ranks, one process), the largest loss difference, bytes per client per
    round it was selected, counted and predicted, PFLEGO's largest difference from one process's applied gradient
    and (every client selected) from the whole objective's gradient."""
    target, s = spec.run.target_loss, shapes(spec.model)
    every = ranks["config"]["participation"] >= 1.0
    out = {}
    for method in METHODS:
        got, ref = ranks[method], single[method]
        down, up = transfer_bytes(s, method, spec.federation.bytes_per_value)
        out[method] = {
            "rounds_to_target": rounds_to(got["losses"], target),
            "rounds_to_target_1p": rounds_to(ref["losses"], target),
            "loss_diff": max(abs(a - b) for a, b in zip(got["losses"], ref["losses"], strict=True)),
            "download_bytes_per_round": _per_round(got["download_bytes"], got["selected_rounds"]),
            "predicted_download": down,
            "upload_bytes_per_round": _per_round(got["upload_bytes"], got["selected_rounds"]), "predicted_upload": up,
            "applied_diff": _largest(got["applied"], ref["applied"]),
            "exact_gradient_diff": _largest(got["applied"], ref["full"]) if every else None,
            "final_loss": got["losses"][-1]}
    return out


def _per_round(counted: list[int], selected: list[int]) -> list[float]:
    return [b / n if n else 0.0 for b, n in zip(counted, selected, strict=True)]


def _largest(got: list[list[float]], ref: list[list[float]]) -> float | None:
    """The largest difference between two lists of vectors (``None``: none, FedAvg's)."""
    return max((abs(a - b) for g, f in zip(got, ref, strict=True) for a, b in zip(g, f, strict=True)), default=None)


def client_launches(config: FederatedRunConfig, method: Method) -> int:
    """Operators client 0 dispatches in one round of ``method`` from the initial weights
    (:func:`plait.workloads.op_count.launches`)."""
    from plait.workloads.federated import toy
    from plait.workloads.op_count import launches  # torch: only where the ranks ran

    body, data = toy.init_body(config), toy.client_data(config, 0)
    if method == "pflego":
        return launches(lambda: toy.pflego_client(body, toy.init_head(config, 0), data, config.local_steps,
                                                  config.head_lr, config.lr))
    return launches(lambda: toy.fedavg_client(body + toy.init_head(config, -1), data, config.local_steps, config.lr))


def round_times(spec: FederatedSpec, config: FederatedRunConfig, ranks: dict[str, Any],
                cluster: str | None) -> dict[str, dict[str, float]]:
    """Per method: the server's round, measured (wall and CPU seconds, :func:`steady_s`), and, on ``cluster``,
    predicted (:func:`loopback_round`)."""
    hardware = resolve_cluster(cluster) if cluster else None
    out = {}
    for method in METHODS:
        got = ranks[method]
        out[method] = {"round_s": steady_s([got["round_s"]]), "round_cpu_s": steady_s([got["round_cpu_s"]])}
        if all(len(c) == config.rounds for c in got["client_cpu_s"]):  # every client in every round
            out[method]["client_cpu_s"] = steady_s(got["client_cpu_s"])
        if hardware is not None:
            predicted = loopback_round(spec, hardware, method, config.clients, config.participation,
                                       client_launches(config, method))
            out[method] |= {"predicted_s": predicted.round_s, "compute_s": predicted.compute_s,
                            "transfer_s": predicted.transfer_s}
    return out


def run_federated(spec: FederatedSpec, rounds: int, dry_run: bool,
                  cluster: str | None = None) -> dict[str, dict[str, Any]] | None:
    """Both methods on ``[run].clients + 1`` CPU ranks beside one process; the comparison (``None`` on a dry run),
    the rounds predicted on ``cluster`` where given."""
    config = run_config(spec, rounds)
    check_cpu_machine(config.clients + 1, 64 * 1024 * 1024)  # assumed: a toy MLP's rank needs well under 64 MiB
    console = rich_console()
    console.print(f"{spec.name}: 1 server + {config.clients} client ranks, {rounds} rounds, {config.local_steps} "
                  f"local steps, {config.participation:g} of the clients selected per round, PFLEGO then FedAvg")
    if dry_run:
        return None
    ranks = run_worker(WORKER, config.clients + 1, config)
    from plait.workloads.federated.worker import train  # torch: only where the ranks ran

    result = compare(spec, ranks, train(replace(config, reference=1)))
    table = titled_table(f"{spec.name} on gloo ranks: rounds to loss {spec.run.target_loss:g}, bytes per client "
                         "per round it was selected")
    for col in ("method", "rounds (ranks)", "rounds (1 process)", "max |loss diff|", "final loss", "down / predicted",
                "up / predicted", "applied vs 1 process", "applied vs objective's gradient"):
        table.add_column(col, justify="right")
    for method, r in result.items():
        table.add_row(method, _rounds(r["rounds_to_target"], rounds), _rounds(r["rounds_to_target_1p"], rounds),
                      f"{r['loss_diff']:.2e}",
                      f"{r['final_loss']:.4f}", _bytes(r["download_bytes_per_round"], r["predicted_download"]),
                      _bytes(r["upload_bytes_per_round"], r["predicted_upload"]),
                      _diff(r["applied_diff"]), _diff(r["exact_gradient_diff"]))
    console.print(table)
    times = round_times(spec, config, ranks, cluster)
    _print_times(console, times, cluster)
    for method, found in times.items():
        result[method] |= found
    return result


def _print_times(console: Any, times: dict[str, dict[str, float]], cluster: str | None) -> None:
    table = titled_table(f"round time: the server's, median after {WARMUP_STEPS} warm-up rounds (CPU: the server's "
                         "thread's, and the slowest client's, each selected every round)")
    columns = ["method", "measured ms", "server CPU ms", "client CPU ms"]
    columns += ["predicted ms", "compute ms", "transfers ms", "predicted / measured"] if cluster else []
    for col in columns:
        table.add_column(col, justify="right")
    for method, t in times.items():
        client = f"{t['client_cpu_s'] * 1e3:.2f}" if "client_cpu_s" in t else "-"
        row = [method, f"{t['round_s'] * 1e3:.2f}", f"{t['round_cpu_s'] * 1e3:.2f}", client]
        if cluster:
            row += [f"{t['predicted_s'] * 1e3:.2f}", f"{t['compute_s'] * 1e3:.2f}", f"{t['transfer_s'] * 1e3:.2f}",
                    f"{t['predicted_s'] / t['round_s']:.2f}"]
        table.add_row(*row)
    console.print(table)
    note = (f"predicted on {cluster}: the client ranks' CPU and the loopback's gloo figures, not the TOML's [client] "
            "and WAN link" if cluster else "no prediction: --cluster calibrated.toml (`plait calibrate`) predicts "
            "this machine's rounds")
    console.print(f"note: {note}", markup=False)


def _rounds(found: int | None, rounds: int) -> str:
    return f"> {rounds}" if found is None else str(found)


def _diff(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _bytes(counted: list[float], predicted: int) -> str:
    return " / ".join(f"{b:,.0f}" for b in counted) + f" ({predicted:,})"
