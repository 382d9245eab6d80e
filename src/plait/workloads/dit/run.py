"""``plait run --model DIT.toml``: the DiT worker on this machine's CPU ranks (gloo), next to a single-process
reference and the cost model's bytes.

The TOML's blocks (hidden, heads, layers) denoise its job's image with a small DiT under the plan's CFG parallel,
Ulysses, ring (USP when both), tensor parallel, DistriFusion or PipeFusion degrees, and layer-wise offload
emulated (the host-to-device copies counted; on a CPU nothing crosses a link); printed: the latent's
difference from one process (exact methods: rounding only; stale ones: the staleness) and each rank's bytes against
:func:`plait.workloads.dit.sent_bytes.rank_sent_bytes`. Only models small enough for this machine run (the memory
check uses plait's estimate).
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
from plait.workloads.dit.cost import DISTRIFUSION_WARMUP, DitPlan, check_plan
from plait.workloads.dit.offload import streamed_bytes_per_step
from plait.workloads.dit.predict import parse_dit_plan
from plait.workloads.dit.sent_bytes import rank_sent_bytes

DIT_WORKER = "plait.workloads.dit.worker"
GUIDANCE_SCALE = 4.0
"""Classifier-free guidance scale when the job guides (facebookresearch/DiT sample.py: ``--cfg-scale`` default
4.0); any scale exercises the same passes and bytes."""
PIPEFUSION_WARMUP = 1
"""PipeFusion's synchronous steps first (xDiT's ``--warmup_steps`` default 1, xfuser/config/args.py)."""
FP32 = 4


def runnable_plan(plan: DitPlan) -> DitPlan:
    """``plan`` if the CPU runtime runs it; else one line saying why (what only xDiT on GPUs runs)."""
    if plan.pipefusion > 1 and plan.tp > 1:
        raise ConfigError(f"--parallel {plan.label()}: PipeFusion with TP inside its stages is neither xDiT's nor "
                          "plait's runtime's")
    return plan


def run_dit(workload: Workload, parallel: str | None, gpus: int, dry_run: bool) -> None:
    spec, job = workload.description
    plan = runnable_plan(parse_dit_plan(parallel or f"ulysses={gpus}"))
    if spec.kind != "dit":
        raise ConfigError(f"{spec.name}: kind={spec.kind!r}: plait run denoises a plain class-conditioned DiT on CPU "
                          "ranks; export the plan for xDiT (plait plan --export)")
    if spec.side_attention_calls:
        raise ConfigError(f"{spec.name}: side_attention_every={spec.side_attention_every}: plait run's DiT has no "
                          "side cross-attention; remove it to run the blocks alone")
    check_plan(spec, job, plan)
    ranks = plan.gpus
    if ranks < 2:
        raise ConfigError(f"--parallel {plan.label()}: plait run needs at least 2 ranks")
    require_extra("run", "plait run of a DiT")
    check_cpu_machine(ranks, 4 * spec.params() * 3)  # fp32 weights, activations and the reference's copy
    side = job.resolution // spec.vae_downsample // spec.patch
    warmup = DISTRIFUSION_WARMUP if plan.distrifusion > 1 else PIPEFUSION_WARMUP
    config = DitConfig(cfg=plan.cfg, pipefusion=plan.pipefusion, patches=plan.patches, distrifusion=plan.distrifusion,
                       ring=plan.ring, ulysses=plan.ulysses, tp=plan.tp, guidance=GUIDANCE_SCALE if job.cfg else 0.0,
                       offload=plan.offload,
                       hidden=spec.hidden, heads=spec.heads, layers=spec.layers, side=side, patch=spec.patch,
                       channels=spec.latent_channels, batch=job.batch, steps=job.steps,
                       warmup=min(warmup, job.steps), check=plan.stale, out=Path("unused"))
    stale = f", {max(0, job.steps - warmup)} of them stale" if plan.stale else ""
    console = rich_console()
    console.print(f"{spec.name}: {job.batch} image(s), {side * side} tokens, {job.steps} steps{stale}, "
                  f"{plan.label()} on {ranks} gloo ranks (fp32)")
    if dry_run:
        return
    import torch

    measured = run_worker(DIT_WORKER, ranks, config)
    from plait.workloads.dit.worker import run

    single = torch.tensor(run(replace(config, ranks=1))["latent"])
    predicted = rank_sent_bytes(plan, image_tokens=side * side, hidden=spec.hidden,
                                patch_values=spec.patch**2 * spec.latent_channels, layers=spec.layers,
                                batch=job.batch, steps=job.steps, warmup=config.warmup, guided=job.cfg,
                                element_bytes=FP32)
    latent = torch.tensor(measured["latent"])
    console.print(f"latent vs one process: max |difference| {float((latent - single).abs().max()):.3g}, relative L2 "
                  f"{float((latent - single).norm() / single.norm()):.3g}")
    checked = [pair for rank in measured.get("attention_errors", []) for pair in rank]
    if checked:
        worst = max(error / bound for error, bound in checked if bound > 0)
        held = "each within" if all(error <= bound for error, bound in checked) else "NOT all within"
        console.print(f"{len(checked)} stale attentions checked against attention over fresh K, V: {held} its derived "
                      f"bound (stale_attention_bound; largest error {max(e for e, _ in checked):.3g}, "
                      f"{worst:.2f} of its bound)")
    for rank, (sent, expected) in enumerate(zip(measured["bytes_sent"], predicted)):
        console.print(f"rank {rank}: sent {sent:,} bytes, predicted {expected:,.0f}")
    if plan.offload:
        stream = job.steps * streamed_bytes_per_step(spec.params(), FP32, plan.pipefusion * plan.tp)
        for rank, (streamed, peak) in enumerate(zip(measured["streamed_bytes"], measured["peak_loaded_layers"])):
            console.print(f"rank {rank}: streamed {streamed:,} bytes of weights in (emulated: nothing crosses a link "
                          f"on this machine), predicted {stream:,.0f}; at most {peak} layers resident")
