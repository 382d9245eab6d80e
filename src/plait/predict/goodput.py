"""Goodput: the share of wall time a long run trains, given failures, checkpoints and restarts.

- Failures: a synchronous job stops when any of its GPUs' components fails, so its mean time between
  failures is ``1 / (rate per GPU-hour x GPUs)``; the rate is the Llama 3 405B run's measured one
  (``hardware/data/reliability.toml``: 419 unexpected interruptions in 54 days on 16,384 H100, by root cause).
- Checkpoints: writing one takes the state each GPU writes (the job's weights and optimizer state, written
  once and spread over the GPUs: :func:`checkpoint_bytes_per_gpu`) over the per-GPU share of the store's
  bandwidth (the cluster's, else the packaged default); a restart adds failure detection, relaunch and
  reading the checkpoint back.
- Interval and expected wall time: Young 1974 ("A first order approximation to the optimum checkpoint
  interval", CACM 17(9)): ``tau = sqrt(2 delta M)``; Daly 2006 ("A higher order estimate of the optimum
  checkpoint interval for restart dumps", FGCS 22(3), eqs. 20 and 37): wall time
  ``T_w = M exp(R/M) (exp((tau + delta)/M) - 1) T_s / tau`` for failure-free time ``T_s``, and the interval
  that minimises it, ``tau = sqrt(2 delta M) (1 + sqrt(delta/(2M))/3 + (delta/(2M))/9) - delta`` for
  ``delta < 2M`` (else ``M``). Planned interruptions (maintenance) cost one restart each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from plait.cost.estimate import Estimate
from plait.hardware.catalog import reliability_table
from plait.units import GB

S_PER_HOUR = 3600.0


@dataclass(frozen=True, kw_only=True)
class Reliability:
    """Failure and recovery figures (``hardware/data/reliability.toml``)."""

    unexpected_per_gpu_hour: float
    """Unexpected job interruptions per GPU-hour."""
    planned_per_gpu_hour: float
    """Planned interruptions (maintenance) per GPU-hour."""
    by_cause: dict[str, float]
    """Unexpected interruptions per GPU-hour by root cause (they sum to ``unexpected_per_gpu_hour``)."""
    storage_bytes_per_s_per_gpu: float
    """Checkpoint write and read bandwidth per GPU."""
    detect_s: float
    """Seconds until a failure stops the job."""
    relaunch_s: float
    """Seconds to reschedule and re-initialise the job."""
    sources: tuple[str, ...]
    """Where the figures come from."""
    basis: str
    """The measured run the failure rate comes from, in words."""


@cache
def reliability() -> Reliability:
    """The packaged figures: the Llama 3 405B run's interruption rates, storage and restart times."""
    data: dict[str, Any] = reliability_table()
    run = data["interruptions"]["llama3-405b"]
    gpu_hours = run["gpus"] * run["days"] * 24.0
    by_cause = {cause: n / gpu_hours for cause, n in run["unexpected"].items()}
    return Reliability(unexpected_per_gpu_hour=sum(run["unexpected"].values()) / gpu_hours,
                       planned_per_gpu_hour=run["planned"] / gpu_hours, by_cause=by_cause,
                       storage_bytes_per_s_per_gpu=data["storage"]["bandwidth_gb_per_s_per_gpu"] * GB,
                       detect_s=data["restart"]["detect_s"], relaunch_s=data["restart"]["relaunch_s"],
                       sources=(run["source"], data["storage"]["source"], data["restart"]["detect_source"],
                                data["restart"]["relaunch_source"]),
                       basis=(f"{run['run']}'s measured rate, {sum(run['unexpected'].values())} unexpected "
                              f"interruptions in {run['days']} days on {run['gpus']:,} {run['accelerator']}"))


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum interval between checkpoints."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum interval (eq. 37)."""
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s


def daly_wall_time_s(solve_s: float, interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected wall time of ``solve_s`` of failure-free work checkpointed every ``interval_s`` (eq. 20)."""
    return mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + checkpoint_s) / mtbf_s) * solve_s / interval_s


@dataclass(frozen=True, kw_only=True)
class Goodput:
    """What failures cost one plan."""

    mtbf_s: float
    """Mean time between unexpected interruptions of the whole job."""
    checkpoint_bytes_per_gpu: float
    """State one GPU writes per checkpoint (:func:`checkpoint_bytes_per_gpu`)."""
    checkpoint_s: float
    """Seconds to write one checkpoint."""
    restart_s: float
    """Seconds from a failure to training again (detect, relaunch, read the checkpoint)."""
    interval_s: float
    """Daly's optimum time between checkpoints."""
    goodput: float
    """Failure-free time over expected wall time (1: no loss)."""

    def time_to_train_s(self, failure_free_s: float) -> float:
        """Expected wall time of a run that takes ``failure_free_s`` without failures."""
        return failure_free_s / self.goodput


def checkpoint_bytes_per_gpu(est: Estimate) -> float:
    """Bytes one GPU writes per checkpoint: the job's state (:attr:`Estimate.state_bytes`) over its GPUs.
    torch.distributed.checkpoint writes a replicated tensor once, from the rank with the least to write so far
    (``dedup_save_plans`` in torch/distributed/checkpoint/_dedup_save_plans.py), so replicas (DDP, the replicate
    axis of HSDP) share the writing and sharded state (TP, PP, ZeRO) is written by its owner; offloaded state is
    written all the same."""
    return est.state_bytes / est.num_gpus


def goodput(est: Estimate, figures: Reliability | None = None) -> Goodput:
    """Goodput of ``est``'s plan on its GPUs with the packaged (or given) reliability figures."""
    r = figures or reliability()
    mtbf_s = S_PER_HOUR / (r.unexpected_per_gpu_hour * est.num_gpus)
    state = checkpoint_bytes_per_gpu(est)
    write_s = state / (est.storage_bytes_per_s_per_gpu or r.storage_bytes_per_s_per_gpu)
    restart_s = r.detect_s + r.relaunch_s + write_s  # reading back moves the same bytes
    interval_s = daly_interval_s(write_s, mtbf_s)
    solve_s = 1.0e6  # any failure-free span: the ratio does not depend on it
    wall_s = daly_wall_time_s(solve_s, interval_s, write_s, restart_s, mtbf_s)
    wall_s *= 1.0 + r.planned_per_gpu_hour * est.num_gpus * restart_s / S_PER_HOUR  # each planned stop restarts once
    return Goodput(mtbf_s=mtbf_s, checkpoint_bytes_per_gpu=state, checkpoint_s=write_s, restart_s=restart_s,
                   interval_s=interval_s, goodput=solve_s / wall_s)
