"""``plait run --model GLM.toml``: the GLM worker (:mod:`.worker`) on this machine's CPU ranks (gloo), beside one
process and the cost model's bytes.

The data set the TOML describes is generated (:func:`.sgd.make_data`) and trained by data-parallel,
feature-partitioned and switch-aggregated SGD (the switch emulated on rank 0) on the ranks; printed: the largest
difference of the final weights from one process's SGD (the maths is exact: within :data:`TOLERANCE`), and the
bytes each rank sent per step against :func:`plait.workloads.glm.cost.glm_cost`'s. With the squared loss,
coordinate descent split by feature (:mod:`.scd`) and by example (:mod:`.scd_dual`) runs too, under each
aggregation rule: its distance from the optimum after the epochs beside one sequential worker's (convergence, not
exactness) and beside the same workers emulated in one process (exact). Each SGD method's step time, measured (the
slowest rank's, median after the warm-up: :func:`plait.run.steady.steady_s`) beside its prediction on ``--cluster``
(:func:`.run_cost.run_step_s`; ``plait calibrate`` describes this machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.hardware.cluster import Cluster
from plait.run.launch import run_worker
from plait.run.preflight import check_cpu_machine
from plait.run.steady import WARMUP_STEPS, steady_s
from plait.terminal import rich_console, titled_table
from plait.workloads.glm.config import GlmRunConfig
from plait.workloads.glm.cost import METHODS, glm_cost
from plait.workloads.glm.model import GlmSpec
from plait.workloads.glm.run_cost import run_step_s
from plait.workloads.glm.scd import RULES, optimum, scd_in_one_process
from plait.workloads.glm.scd_dual import sdca_in_one_process
from plait.workloads.glm.sgd import batch_rows, data_parallel_step, feature_step, make_data, sgd_reference
from plait.workloads.op_count import launches

WORKER = "plait.workloads.glm.worker"
TOLERANCE = 1e-5
"""Largest weight difference from one process the splits may show (fp32 sums in another order)."""
MAX_ENTRIES = 10_000_000
"""Largest ``samples x features`` the run generates (assumed: about 40 MB of fp32 per rank on a laptop)."""


@dataclass(frozen=True, kw_only=True)
class GlmRunResult:
    """What a run measured against what was expected."""

    max_weight_error: dict[str, float]
    """Per SGD method, the largest |w_ranks - w_one_process|."""
    sent_per_step: dict[str, list[list[int]]]
    """Per SGD method and rank, the bytes the rank sent each step."""
    predicted_sent: dict[str, list[float]]
    """Per SGD method and rank, the cost model's bytes per step (switch-aggregated: rank 0 emulates the switch and
    sends the sum to each other rank)."""
    step_s: dict[str, float]
    """Per SGD method, the measured step: the slowest rank's, median after the warm-up (:func:`steady_s`)."""
    step_cpu_s: dict[str, float]
    """Per SGD method, the CPU seconds of the step likewise (the rank's thread; below ``step_s`` where it waited)."""
    predicted_step_s: dict[str, float]
    """Per SGD method, the step predicted on :attr:`cluster` (:func:`.run_cost.run_step_s`)."""
    cluster: str
    """The cluster the steps are predicted on."""
    scd: dict[str, dict[str, Any]]
    """Per split (``by_feature``, ``by_example``) and aggregation rule: the distance from the optimum after each
    epoch on the ranks, in one process, and of one sequential worker (:func:`_coordinate_descent`)."""


def run_config(spec: GlmSpec, gpus: int, steps: int) -> GlmRunConfig:
    """The worker's configuration of ``spec`` on ``gpus`` ranks, refused where the splits cannot be even."""
    if gpus < 2:
        raise ConfigError(f"--gpus={gpus} must be >= 2 ranks")
    for name in ("batch", "features"):
        if getattr(spec, name) % gpus:
            raise ConfigError(f"[glm].{name}={getattr(spec, name)} must divide by --gpus={gpus} for plait run")
    if spec.loss == "squared" and (spec.l2 <= 0 or spec.samples % gpus):
        raise ConfigError(f"[glm].l2={spec.l2} must be > 0 and samples={spec.samples} divide by --gpus={gpus} for "
                          "plait run's coordinate descent (the squared loss)")
    if spec.samples * spec.features > MAX_ENTRIES:
        raise ConfigError(f"[glm] samples x features = {spec.samples * spec.features:,} must be at most "
                          f"{MAX_ENTRIES:,} for plait run (it generates the data set in memory)")
    return GlmRunConfig(loss=spec.loss, samples=spec.samples, features=spec.features, density=spec.density,
                        batch=spec.batch, learning_rate=spec.learning_rate, l2=spec.l2, steps=steps,
                        scd_epochs=5 if spec.loss == "squared" else 0, out=None)  # type: ignore[arg-type]


def compare(spec: GlmSpec, cfg: GlmRunConfig, gpus: int, measured: dict[str, Any], cluster: Cluster) -> GlmRunResult:
    """The ranks' results against one process and the cost model (steps predicted on ``cluster``)."""
    _, w_ref = sgd_reference(cfg)
    errors, sent, predicted, step, cpu = {}, {}, {}, {}, {}
    for method in METHODS:
        errors[method] = float((torch.tensor(measured[method]["w"]) - w_ref).abs().max())
        sent[method] = measured[method]["sent_per_step"]
        each = glm_cost(spec, cluster, gpus, method).sent_bytes  # bytes do not depend on the cluster
        emulating = (gpus - 1) * each if method == "switch_aggregated" else each  # rank 0 multicasts the sum
        predicted[method] = [emulating] + [each] * (gpus - 1)
        step[method] = steady_s(measured[method]["step_s"])
        cpu[method] = steady_s(measured[method]["step_cpu_s"])
    scd = _coordinate_descent(cfg, gpus, measured["scd"]) if measured["scd"] else {}
    return GlmRunResult(max_weight_error=errors, sent_per_step=sent, predicted_sent=predicted, step_s=step,
                        step_cpu_s=cpu, predicted_step_s={m: run_step_s(spec, cluster, gpus, m, step_launches(cfg, m,
                                                                                                              gpus))
                                                          for m in METHODS},
                        cluster=cluster.name, scd=scd)


def step_launches(cfg: GlmRunConfig, method: str, world: int) -> int:
    """Operators rank 0 of the worker issues in one SGD step of ``method`` (:func:`plait.workloads.op_count.launches`;
    the all-reduce is costed apart)."""
    x_ND, y_N = make_data(cfg)
    rows, cols = batch_rows(cfg, 0), slice(0, cfg.features // world)
    if method == "data_parallel":
        w_D = torch.zeros(cfg.features)
        return launches(lambda: data_parallel_step(x_ND[rows], y_N[rows], w_D, cfg, 0, world, lambda t: t))
    w_C = torch.zeros(cols.stop)
    return launches(lambda: feature_step(x_ND[rows, cols], y_N[rows], w_C, cfg, lambda t: t))


def _coordinate_descent(cfg: GlmRunConfig, gpus: int, measured: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per split and rule: how far from the optimum the ranks, their one-process emulation and one sequential worker
    are after each epoch (by feature: the primal above it; by example: the dual below it, what the dual's line
    search maximises), and the bytes a rank sent per epoch."""
    x_ND, y_N = make_data(cfg)
    best = optimum(x_ND, y_N, cfg.l2)
    args = (x_ND, y_N, cfg.l2, cfg.scd_block)
    found: dict[str, dict[str, Any]] = {}
    for split in ("by_feature", "by_example"):
        if split == "by_feature":
            def emulate(rule: str, workers: int) -> list[float]:
                return [f - best for f in scd_in_one_process(*args, rule, workers, cfg.scd_epochs, cfg.seed)]
            key = "objective"
        else:
            def emulate(rule: str, workers: int) -> list[float]:
                return [best - d for d in sdca_in_one_process(*args, rule, workers, cfg.scd_epochs, cfg.seed)[1]]
            key = "dual"
        sequential = emulate("add", 1)
        found[split] = {rule: {"ranks": [abs(f - best) for f in measured[split][rule][key]],
                               "one_process": emulate(rule, gpus), "sequential": sequential,
                               "sent_per_epoch": measured[split][rule]["sent_per_epoch"]} for rule in RULES}
    return found


def run_glm(spec: GlmSpec, gpus: int, steps: int, dry_run: bool, cluster: str | None = None) -> GlmRunResult | None:
    """Train ``spec`` on ``gpus`` CPU ranks beside one process and print the comparison, the steps predicted on
    ``cluster`` (a preset or file; default :data:`DEFAULT_CLUSTER`); nothing runs on ``dry_run``."""
    cfg = run_config(spec, gpus, steps)
    hardware = resolve_cluster(cluster or DEFAULT_CLUSTER)
    check_cpu_machine(gpus, 4.0 * spec.samples * spec.features * 2)  # the data set and its copy per rank
    if dry_run:
        rich_console().print(f"dry run: {spec.name} on {gpus} gloo ranks, {steps} SGD steps per method")
        return None
    result = compare(spec, cfg, gpus, run_worker(WORKER, gpus, cfg), hardware)
    _print(spec, gpus, steps, result, hardware.source)
    return result


def _print_steps(console: Any, result: GlmRunResult, source: str) -> None:
    table = titled_table(f"step time, the slowest rank's median after {WARMUP_STEPS} warm-up steps (CPU: its "
                         "thread's CPU seconds)")
    for column in ("method", "measured us", "CPU us", "predicted us", "predicted / measured"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for method, measured in result.step_s.items():
        predicted = result.predicted_step_s[method]
        table.add_row(method, f"{measured * 1e6:.1f}", f"{result.step_cpu_s[method] * 1e6:.1f}",
                      f"{predicted * 1e6:.1f}", f"{predicted / measured:.2f}")
    console.print(table)
    if not source.startswith("measured by plait calibrate"):
        console.print(f"note: predicted for {result.cluster}, not this CPU; `plait calibrate` measures this machine "
                      "for --cluster calibrated.toml", markup=False)


def _print(spec: GlmSpec, gpus: int, steps: int, result: GlmRunResult, hardware_source: str) -> None:
    console = rich_console()
    table = titled_table(f"{spec.name} on {gpus} gloo ranks, {steps} SGD steps: ranks vs one process")
    for column in ("method", "max |w - w_1|", "bytes/step sent by rank", "predicted"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for method, error in result.max_weight_error.items():
        counts = [",".join(f"{c:,}" for c in sorted(set(steps))) for steps in result.sent_per_step[method]]
        table.add_row(method, f"{error:.2e}" + ("" if error <= TOLERANCE else " (not exact)"), " / ".join(counts),
                      " / ".join(f"{p:,.0f}" for p in result.predicted_sent[method]))
    console.print(table)
    _print_steps(console, result, hardware_source)
    for split, rules in result.scd.items():
        for rule, found in rules.items():
            console.print(f"SCD {split.replace('_', ' ')}, {rule}: {len(found['ranks'])} epochs "
                          f"{found['ranks'][-1]:.4g} from the optimum (one process {found['one_process'][-1]:.4g}, "
                          f"one worker {found['sequential'][-1]:.4g}); {found['sent_per_epoch']:,} B/epoch sent")
