"""Rich tables for estimates and validations; no computation happens here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from plait.cost.estimate import Estimate
from plait.predict.goodput import goodput, reliability
from plait.terminal import titled_table
from plait.units import GIB

if TYPE_CHECKING:
    from plait.validate.memory import MemoryValidation
    from plait.validate.report import Scored, Validation


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def print_estimate(console: Console, est: Estimate, train_tokens: float) -> None:
    """Summary, time breakdown, memory breakdown and cost to train."""
    _print_header(console, est)
    _print_time(console, est)
    _print_memory(console, est)
    _print_throughput(console, est)
    _print_cost(console, est, train_tokens)
    _print_failures(console, est, train_tokens)
    for warning in est.warnings:
        console.print(f"[yellow]warning[/]: {warning}")


def _print_header(console: Console, est: Estimate) -> None:
    """The model, cluster, engine, plan and parameter count."""
    console.print(f"[bold]{est.model_name}[/] on {est.num_gpus} x {est.cluster_name}, run by {est.engine}")
    console.print(f"plan: {est.plan.describe()}  (micro-batches per step: {est.plan.num_micro_batches})")
    if est.num_params:
        active = (f", {_count(est.num_active_params)} active per token" if est.num_active_params != est.num_params
                  else "")
        console.print(f"parameters: {_count(est.num_params)}{active}")


def _print_time(console: Console, est: Estimate) -> None:
    """The step time with its interval, and its components' seconds and shares."""
    low, high = est.step_time_interval_s
    time_table = titled_table(f"Step time {est.step_time_s:.4g} s (80% interval {low:.4g}-{high:.4g} s)")
    time_table.add_column("component")
    time_table.add_column("seconds", justify="right")
    time_table.add_column("share", justify="right")
    for name, value in est.time.items():
        if value > 0:
            time_table.add_row(name, f"{value:.4g}", f"{100 * value / est.step_time_s:.1f}%")
    console.print(time_table)


def _print_memory(console: Console, est: Estimate) -> None:
    """The memory per GPU by component, and whether it (and any swapped activations) fits."""
    mem = est.memory
    mem_table = titled_table(f"Memory per GPU, pipeline stage {mem.stage} "
                             f"({mem.inflight_micro_batches:g} micro-batches in flight)")
    mem_table.add_column("component")
    mem_table.add_column("GiB", justify="right")
    for name, value in mem.items():
        mem_table.add_row(name, f"{value / GIB:.2f}")
    mem_table.add_row("[bold]total[/]", f"[bold]{mem.total_bytes / GIB:.2f}[/]")
    mem_table.add_row("capacity", f"{mem.capacity_bytes / GIB:.2f}")
    if mem.host_activations_bytes:
        mem_table.add_row("swapped to host", f"{mem.host_activations_bytes / GIB:.2f}")
    console.print(mem_table)
    if mem.host_activations_bytes > mem.host_capacity_bytes:
        console.print(f"[bold red]does not fit[/]: swapped activations need {mem.host_activations_bytes / GIB:.1f} GiB "
                      f"of host memory, the GPU's share is {mem.host_capacity_bytes / GIB:.1f} GiB")
    elif mem.fits:
        console.print(f"fits: {mem.headroom_bytes / GIB:.1f} GiB headroom")
    else:
        console.print(f"[bold red]does not fit[/]: needs {mem.total_bytes / GIB:.1f} GiB, the GPU has "
                      f"{mem.capacity_bytes / GIB:.1f} GiB (exceeds by {-mem.headroom_bytes / GIB:.1f} GiB)")


def _print_throughput(console: Console, est: Estimate) -> None:
    """Throughput, MFU and HFU; a non-allreduce sync's steps multiplier and a gossip's spectral gap."""
    unit = est.sample_unit
    convention = "PaLM" if unit == "tokens" else "traced"
    console.print(f"throughput: {est.tokens_per_s:,.0f} {unit}/s, {est.tokens_per_s_per_gpu:,.0f} {unit}/s/GPU; "
                  f"MFU {100 * est.mfu:.1f}%, HFU {100 * est.hfu:.1f}% ({convention} FLOP convention, "
                  f"{est.plan.precision} dense peak)")
    if not est.plan.dp_sync.is_allreduce:
        figure = est.convergence
        said = (f"{figure.multiplier:.3g} ({figure.basis}: {figure.source})" if figure.known
                else f"unknown, taken as 1: {figure.source}")
        console.print(f"steps multiplier of {est.plan.dp_sync.spec}: {said}; time-to-target below = steps x multiplier "
                      f"x step time")
    gap = est.gossip_spectral_gap
    if gap is not None:
        console.print(f"gossip mixing: spectral gap {gap:.4g} (1 - rho of the mixing matrix; decentralized SGD's "
                      "extra steps grow as 1/gap^2, Lian et al. 2017, Theorem 1)")


def _print_cost(console: Console, est: Estimate, train_tokens: float) -> None:
    """Time, GPU-hours, price (with egress) and energy to train, and the bytes leaving a site per step."""
    egress = est.egress_usd(train_tokens)
    console.print(f"to train {train_tokens:.3g} {est.sample_unit}: {_duration(est.time_to_train_s(train_tokens))}, "
                  f"{est.gpu_hours(train_tokens):,.0f} GPU-hours, ${est.cost_usd(train_tokens):,.0f} "
                  + (f"(${est.cost_usd(train_tokens) - egress:,.0f} " if egress else "")
                  + f"at ${est.price_per_gpu_hour_usd:.2f}/GPU-hour"
                  + (f" + ${egress:,.0f} of egress at ${est.egress_usd_per_gb:g}/GB)" if egress else ""))
    _print_energy(console, est, train_tokens)
    if est.egress_bytes_per_step:
        console.print(f"between sites: {est.egress_bytes_per_step / 1e9:.3g} GB leave a site per step")


def _print_failures(console: Console, est: Estimate, train_tokens: float) -> None:
    """Goodput under failures: MTBF, checkpoint time and interval (Daly 2006), time and cost with failures."""
    failures = goodput(est)
    console.print(f"with failures ({reliability().basis}): one every {_figure(failures.mtbf_s / 3600)} h at "
                  f"{est.num_gpus:,} GPUs; a checkpoint of "
                  f"{failures.checkpoint_bytes_per_gpu / GIB:.2f} GiB/GPU takes {failures.checkpoint_s:.3g} s, "
                  f"best every {_figure(failures.interval_s / 60)} min (Daly 2006); goodput "
                  f"{100 * failures.goodput:.1f}%: {_duration(failures.time_to_train_s(est.time_to_train_s(train_tokens)))}, "
                  f"${est.cost_usd(train_tokens) / failures.goodput:,.0f}"
                  + (f", {_figure(train_j / failures.goodput / 3.6e9)} MWh" if (train_j := est.energy_j(train_tokens))
                     else ""))

def _print_energy(console: Console, est: Estimate, train_tokens: float) -> None:
    """Energy per step and token, to train, and the power figures behind them (plait.cost.energy)."""
    energy, power, per_token = est.energy_per_step, est.power, est.joules_per_token
    train_j = est.energy_j(train_tokens)
    if energy is None or power is None or train_j is None or per_token is None:
        console.print("energy: not predicted (the cluster's power is unknown)")
        return
    console.print(f"energy: {_figure(energy.total_j / 1e3)} kJ/step, {per_token:.4g} J/{est.sample_unit.removesuffix('s')} "
                  f"(GPUs {100 * energy.gpu_j / energy.it_j:.0f}%, hosts {100 * energy.host_j / energy.it_j:.0f}%, "
                  f"network {100 * energy.network_j / energy.it_j:.0f}% of IT, x PUE {energy.pue:g}); to train: "
                  f"{_figure(train_j / 3.6e9)} MWh; average {_figure(energy.total_j / est.step_time_s / 1e3)} kW")
    console.print(f"  power per GPU: {power.busy_w.value:g} W busy {energy.busy_s:.3g} s, {power.communicating_w.value:g} W "
                  f"communicating {energy.communicating_s:.3g} s, {power.idle_w.value:g} W idle {energy.idle_s:.3g} s "
                  f"of the step; host {power.host_w_per_gpu.value:g} W, network {power.network_w_per_gpu.value:g} W "
                  "(each with its source in --json 'power'; docs/energy.md)")


def _count(value: float) -> str:
    """A parameter count in millions or billions, three significant digits (8.03 B)."""
    return f"{value / 1e9:.3g} B" if value >= 1e9 else f"{value / 1e6:.3g} M"


def _figure(value: float) -> str:
    """Three significant digits, without an exponent."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def print_validation(console: Console, validation: Validation) -> None:
    """Per-row predicted vs measured, then MAPE overall and per source."""
    table = titled_table("Predicted vs measured step time")
    for column in ("id", "layout (unknown knobs filled)", "predicted s", "measured s", "error"):
        table.add_column(column, justify="right" if column.endswith(("s", "error")) else "left")
    for r in validation.predicted:
        assert r.estimate and r.row.step_time_s
        note = "" if r.fits else " (no candidate fits)"
        table.add_row(r.row.id, r.estimate.plan.describe() + note, f"{r.estimate.step_time_s:.3f}",
                      f"{r.row.step_time_s:.3f}", f"{r.error_pct:+.1f}%")
    console.print(table)
    _print_scores(console, validation, [r for r in validation.results if r.estimate is None], "MAPE")
    coverage = validation.interval_coverage()
    if coverage:
        console.print(f"step-time interval (nominal {100 * coverage['nominal']:.0f}%): leave-one-source-out coverage "
                      f"{100 * coverage['leave_one_source_out']:.1f}%; per source "
                      + ", ".join(f"{s} {100 * v:.0f}%" for s, v in coverage["per_source"].items()))


def print_memory_validation(console: Console, validation: MemoryValidation) -> None:
    """Per-row predicted vs measured peak memory, then MAPE overall and per source."""
    table = titled_table("Predicted vs measured peak memory per GPU")
    for column in ("id", "layout (unknown knobs filled)", "measured as", "predicted GiB", "measured GiB", "error"):
        table.add_column(column, justify="right" if column.endswith(("GiB", "error")) else "left")
    for r in validation.predicted:
        assert r.predicted_gib is not None
        table.add_row(r.row.id, r.layout, r.kind, f"{r.predicted_gib:.1f}", f"{r.measured_gib:.1f}",
                      f"{r.error_pct:+.1f}%")
    console.print(table)
    _print_scores(console, validation, [r for r in validation.results if r.predicted_gib is None], "memory MAPE")


def _print_scores(console: Console, validation: Scored, skipped: list, label: str) -> None:  # type: ignore[type-arg]
    """The rows not predicted and why, then MAPE overall and per source."""
    for r in skipped:
        console.print(f"not predicted: {r.row.id}: {r.reason}")
    console.print(f"[bold]{label} {validation.mape_pct:.1f}%[/] over {len(validation.predicted)} rows "
                  f"({len(skipped)} not predicted)")
    for source, mape in validation.per_source().items():
        console.print(f"  {source}: {mape:.1f}%")
