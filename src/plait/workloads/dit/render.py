"""Tables of a diffusion-transformer inference job: one plan's step and latency, and the plan search."""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from plait.terminal import titled_table
from plait.units import GIB
from plait.workloads.dit.cost import DitPlan
from plait.workloads.dit.predict import DitPrediction


def _label(result: DitPrediction) -> str:
    return result.plan.label() + (" (stale activations)" if result.plan.stale else "")


def print_dit(console: Console, result: DitPrediction) -> None:
    est, job = result.estimate, result.job
    console.print(f"{result.spec.name} on {result.plan.gpus} x {result.cluster.accelerator.name} "
                  f"({result.cluster.name}): {_label(result)}")
    size = f"{job.resolution}x{job.pixels_high}" + (f"x{job.frames}f" if job.frames > 1 else "")
    console.print(f"{job.batch} output(s) of {size} px ({job.image_tokens(result.spec):,} tokens), "
                  f"{job.steps} steps{', classifier-free guidance' if job.cfg else ''}")
    table = titled_table("one denoising step per GPU")
    table.add_column("part")
    table.add_column("ms", justify="right")
    table.add_row("compute (GEMMs, attention)", f"{1e3 * est.compute_s:.3f}")
    table.add_row("communication left exposed", f"{1e3 * est.comm_s:.3f}")
    table.add_row("step", f"{1e3 * est.step_s:.3f}")
    console.print(table)
    e2e = result.end_to_end
    console.print(f"denoising {est.latency_s:.3f} s on the device for the batch; end to end {e2e.total_s:.3f} s "
                  f"({job.batch / e2e.total_s:.2f} outputs/s): text encoders {e2e.text_encode_s:.3f} s, steps with "
                  f"the host's launches ({1e3 * e2e.host_step_s:.1f} ms a step, "
                  f"{'torch.compile' if job.compiled else 'eager'}) {e2e.denoise_s:.3f} s, VAE decode "
                  f"{e2e.vae_decode_s:.3f} s; memory {est.memory_bytes / GIB:.2f} GiB per GPU "
                  f"(weights {est.weight_bytes / GIB:.2f}, stale K/V {est.buffer_bytes / GIB:.2f})")


def print_dit_search(console: Console, ranked: list[DitPrediction], refused: list[tuple[DitPlan, str]],
                     top: int = 10) -> None:
    table = titled_table(f"plans, lowest latency end to end first ({len(ranked)} fit)")
    for col in ("plan", "end to end s", "denoising s", "step ms", "exposed comm ms", "GiB"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    for r in ranked[:top]:
        est = r.estimate
        table.add_row(_label(r), f"{r.end_to_end.total_s:.3f}", f"{est.latency_s:.3f}", f"{1e3 * est.step_s:.3f}",
                      f"{1e3 * est.comm_s:.3f}", f"{est.memory_bytes / GIB:.2f}")
    console.print(table)
    if len(ranked) > 1:
        best, second = ranked[0].end_to_end, ranked[1].end_to_end
        console.print(f"winner {_label(ranked[0])}: {second.total_s / best.total_s - 1:.1%} faster than "
                      f"{_label(ranked[1])}")
    reasons = Counter(why.split(":")[0] if "GiB" in why else why for _, why in refused)
    for why, count in reasons.most_common():
        console.print(f"refused ({count}): {why}")
