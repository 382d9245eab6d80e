"""``plait run --plan`` of an asynchronous plan (``async_ps``, ``easgd``): its ``dp`` workers and the method's server
ranks on this node, through :mod:`plait.run.async_train`, and each step's metrics as the synchronous runtime writes
them.

A step is what the cost model calls one (:mod:`plait.cost.async_sgd`): ``dp`` worker iterations, one global
batch. The workers' iterations, ordered by when they ended, are cut into steps of ``dp`` each; a step's time is
the wall time between the ends of consecutive steps (the first from the start), its loss the mean of its
iterations' losses. ``sync_bytes`` is what worker 0 sent in its iteration of that index (the cost model's
:func:`plait.cost.async_sgd.worker_bytes` per worker and iteration); the peak memory is the largest of the
workers' (resident set size on CPU ranks).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.config import config_argv
from plait.run.launch import RanksFailed, run_worker
from plait.run.worker_config import WorkerConfig
from plait.run.workload_configs import AsyncConfig

MODULE = "plait.run.async_train"


def check_async(config: WorkerConfig, plan: Plan, nodes: int) -> None:
    """What an asynchronous plan's run refuses before any process starts: the options of the synchronous runtime
    that its workers do not implement."""
    refused = [name for name, on in (("--checkpoint-dir", config.checkpoint_dir), ("--resume", config.resume),
                                     ("--trace-dir", config.trace_dir), ("--batch-split", config.batch_split),
                                     ("--stage-layers", config.stage_layers)) if on]
    if nodes != 1:
        refused.append(f"--nodes={nodes}")
    if refused:
        raise ConfigError(f"dp_sync={plan.dp_sync.spec!r} runs its workers and server ranks on this node through "
                          f"{MODULE}, which takes none of {', '.join(refused)}")
    if config.slowdown and len(config.slowdown) != plan.dp:
        raise ConfigError(f"--slowdown has {len(config.slowdown)} factors; the plan has {plan.dp} workers (one each)")


def async_config(config: WorkerConfig, model: str, plan: Plan, out: Path) -> AsyncConfig:
    """The asynchronous runtime's configuration for ``plan`` (each worker its share of the global batch, AdamW)."""
    return AsyncConfig(out=out, model=model, spec=(plan.dp_sync.spec,), workers=plan.dp, steps=config.steps,
                       batch=plan.global_batch, optimizer="adamw",
                       bf16=plan.precision == "bf16" and not config.full_precision, slowdown=config.slowdown)


def ranks(plan: Plan) -> int:
    """Processes the run starts: the workers, then the method's server ranks."""
    return plan.dp + plan.dp_sync.server_ranks


def launch_line(config: AsyncConfig, plan: Plan) -> str:
    """The torchrun line that runs ``config`` (what a dry run says)."""
    parts = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks(plan)}", "-m",
             MODULE, *config_argv(config)]
    return " ".join(shlex.quote(str(p)) for p in parts)


def run_async_plan(config: WorkerConfig, model: str, plan: Plan, tokens_per_step: int) -> tuple[int, tuple[
        dict[str, Any], ...]]:
    """Train ``plan`` on its workers and server ranks here; (exit code, one metrics row per step)."""
    try:
        result = run_worker(MODULE, ranks(plan), async_config(config, model, plan, Path("unused.json")))
    except RanksFailed as exc:
        return exc.code, ()
    rows = step_rows(result[plan.dp_sync.spec], plan.dp, tokens_per_step)
    if config.metrics is not None:
        with config.metrics.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(r) + "\n" for r in rows)
    return 0, rows


def step_rows(result: dict[str, Any], workers: int, tokens_per_step: int) -> tuple[dict[str, Any], ...]:
    """One row per ``workers`` iterations of ``result`` (:func:`plait.run.async_train.run_case`'s), in the order
    they ended (module docstring)."""
    ends = sorted((t, loss) for w in result["workers"] for t, loss in zip(w["times"], w["losses"], strict=True))
    first = result["workers"][0]
    peak = max(w["peak_memory_bytes"] for w in result["workers"])
    rows, began = [], 0.0
    for step in range(len(ends) // workers):
        chunk = ends[step * workers: (step + 1) * workers]
        seconds = chunk[-1][0] - began
        began = chunk[-1][0]
        row = {"step": step + 1, "loss": sum(loss for _, loss in chunk) / workers, "grad_norm": None,
               "step_time_s": seconds, "tokens_per_s": tokens_per_step / seconds, "peak_memory_bytes": peak}
        if step < len(first["bytes"]):
            row["sync_bytes"] = first["bytes"][step]
        rows.append(row)
    return tuple(rows)
