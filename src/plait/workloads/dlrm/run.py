"""``plait run --model DLRM.toml``: train a DLRM's placement on TorchRec and compare with the prediction."""

from __future__ import annotations

import statistics
from pathlib import Path

from plait.errors import ConfigError, require_extra
from plait.run.launch import run_worker
from plait.run.preflight import check_cpu_machine
from plait.run.workload_configs import DlrmConfig
from plait.terminal import rich_console, titled_table
from plait.workloads.dlrm.predict import DlrmPrediction, placements_text

WORKER = "plait.workloads.dlrm.worker"


def check_torchrec() -> None:
    """Refuse a DLRM run where TorchRec is not installed."""
    require_extra("recsys", "plait run of a DLRM")
    try:
        import torchrec  # noqa: F401
    except ImportError as error:  # installed, but does not load (an fbgemm-gpu built for another torch)
        raise ConfigError(f"plait run of a DLRM: torchrec is installed but does not import ({error})") from None


def run_dlrm(model: str, predicted: DlrmPrediction, steps: int, optimizer: str, dry_run: bool) -> None:
    """Train ``predicted``'s placement (tables as given, else by plait's planner) ``steps`` steps on its ranks (gloo on
    CPU) and print the losses, the step time and each rank's counted bytes next to the prediction; ``model``: the
    DLRM TOML the ranks read."""
    from plait.workloads.dlrm.worker import check_runnable

    check_runnable(predicted.spec, predicted.placements, predicted.batch)

    gpus = predicted.world
    check_cpu_machine(gpus, predicted.estimate.max_memory_bytes)
    console = rich_console()
    text = placements_text(predicted.placements)
    console.print(f"placements ({predicted.chosen_by}): {text}" + (
        f"; sparse groups of {predicted.group} ranks (TorchRec's DMPCollection)" if predicted.group < gpus else ""))
    if dry_run:
        return
    config = DlrmConfig(model=Path(model), placements=text, batch=predicted.batch, steps=steps,  # type: ignore[arg-type]
                        optimizer=optimizer, sparse_group=predicted.group, out=Path("unused"))
    measured = run_worker(WORKER, gpus, config)
    table = titled_table(f"{predicted.spec.name} on {gpus} ranks, {predicted.batch} samples per rank")
    for col in ("", "measured", "predicted"):
        table.add_column(col, justify="right")
    steady = measured["step_times_s"][1:] or measured["step_times_s"]
    table.add_row("step time ms (median after step 1)", f"{1e3 * statistics.median(steady):.3f}",
                  f"{1e3 * predicted.estimate.step_s:.3f}")
    table.add_row("loss first / last", f"{measured['losses'][0]:.4f} / {measured['losses'][-1]:.4f}", "")
    step = gpus // predicted.group  # DMPCollection's strided groups: rank k is rank k // step of its group
    for r, counted in enumerate(measured["bytes"]):
        load = predicted.loads[r // step]
        sync = load.replica_weight_bytes + (load.replica_state_bytes if optimizer == "rowwise_adagrad" else 0)
        table.add_row(f"rank {r} embedding bytes sent (pooled fwd + bwd + inputs + headers)",
                      f"{sum(v for k, v in counted.items() if k != 'replica_sync'):,}",
                      f"{load.pooled_out + load.pooled_in + load.index_out + load.header_bytes:,.0f}")
        if step > 1:
            table.add_row(f"rank {r} bytes all-reduced across the {step} replicas", f"{counted['replica_sync']:,}",
                          f"{sync:,.0f}")
    console.print(table)
    if step > 1 and optimizer != "rowwise_adagrad":
        console.print(f"note: {optimizer} keeps no optimizer state: the replicas average the weights only")
    console.print(f"note: predicted for {predicted.cluster.name}, not this machine's ranks; bytes are counted per step")
