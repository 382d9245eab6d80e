"""``plait run --model DIT.toml``: the DiT worker on this machine's CPU ranks (gloo), next to a single-process
reference and the cost model's bytes.

The TOML's blocks (hidden, heads, layers) denoise its job's image with a small DiT by Ulysses or DistriFusion;
printed: the latent's difference from one process and each rank's bytes against :mod:`plait.workloads.dit.cost`'s count.
Only models small enough for this machine run (the memory check uses plait's estimate).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from plait.errors import ConfigError, require_extra
from plait.run.launch import run_worker
from plait.run.preflight import check_cpu_machine
from plait.run.workload_configs import DitConfig
from plait.terminal import rich_console
from plait.workloads import Workload
from plait.workloads.dit.cost import stale_kv_gathers, stale_kv_sent_bytes, ulysses_sent_bytes
from plait.workloads.dit.predict import parse_dit_plan

DIT_WORKER = "plait.workloads.dit.worker"


def run_dit(workload: Workload, parallel: str | None, gpus: int, dry_run: bool) -> None:
    spec, job = workload.description
    plan = parse_dit_plan(parallel or f"ulysses={gpus}")
    sp = "ulysses" if plan.ulysses > 1 else "distrifusion" if plan.distrifusion > 1 else None
    if sp is None or plan.gpus != max(plan.ulysses, plan.distrifusion) or plan.offload or spec.kind != "dit":
        raise ConfigError(f"--parallel {plan.label()}: plait run denoises a plain DiT with Ulysses or DistriFusion "
                          "alone on CPU ranks; export the rest for xDiT (plait plan --export)")
    ranks = plan.gpus
    require_extra("run", "plait run of a DiT")
    check_cpu_machine(ranks, 4 * spec.params() * 3)  # fp32 weights, activations and the reference's copy
    side = job.resolution // spec.vae_downsample // spec.patch
    warmup = 4 if sp == "distrifusion" else 1
    config = DitConfig(sp=sp, hidden=spec.hidden, heads=spec.heads, layers=spec.layers, side=side, patch=spec.patch,
                       channels=spec.latent_channels, batch=job.batch, steps=job.steps, warmup=min(warmup, job.steps),
                       out=Path("unused"))
    console = rich_console()
    console.print(f"{spec.name}: {job.batch} image(s), {side * side} tokens, {job.steps} steps, {plan.label()} on "
                  f"{ranks} gloo ranks (fp32)")
    if dry_run:
        return
    import torch

    measured = run_worker(DIT_WORKER, ranks, config)
    from plait.workloads.dit.worker import run

    single = torch.tensor(run(replace(config, ranks=1))["latent"])
    tokens = side * side // ranks
    if sp == "ulysses":
        predicted = job.steps * spec.layers * ulysses_sent_bytes(tokens, spec.hidden, 4, job.batch, ranks)
    else:
        predicted = spec.layers * stale_kv_gathers(job.steps, min(warmup, job.steps)) * stale_kv_sent_bytes(
            tokens, spec.hidden, 4, job.batch, ranks)
    latent = torch.tensor(measured["latent"])
    console.print(f"latent vs one process: max |difference| {float((latent - single).abs().max()):.3g}, relative L2 "
                  f"{float((latent - single).norm() / single.norm()):.3g}")
    for rank, sent in enumerate(measured["bytes_sent"]):
        console.print(f"rank {rank}: sent {sent:,} bytes, predicted {predicted:,.0f}")
