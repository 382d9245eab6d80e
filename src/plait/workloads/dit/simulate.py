"""The timeline of a DiT's inference, on the event kernel (:mod:`plait.events.kernel`).

Every GPU's denoising steps. PipeFusion is simulated patch by patch: stage ``s`` runs patch
``j`` of step ``t`` once stage ``s - 1`` has sent it (one point-to-point transfer after finishing it) and once it
has itself finished the previous patch; the first stage starts step ``t + 1``'s first patch right after step
``t``'s last, since the other patches' K, V come from the previous step (PipeFusion: Wang et al., arXiv 2405.14430,
Sec. 4), so only the first step fills the pipeline. Other plans run each step as compute then the communication
left exposed (:mod:`plait.workloads.dit.cost`); DistriFusion's warm-up steps expose all of theirs.

The simulated latency of a PipeFusion plan is a check of the closed form's fill term (tests/test_dit.py).
"""

from __future__ import annotations

from plait.events.kernel import Kernel
from plait.simulate.pipeline import Timeline
from plait.workloads.dit.cost import DISTRIFUSION_WARMUP, DitEstimate, DitPlan
from plait.workloads.dit.model import DitJob


def dit_timeline(job: DitJob, plan: DitPlan, est: DitEstimate) -> Timeline:
    """The whole generation, GPU by GPU (one lane per PipeFusion stage; every SP GPU runs alike); PipeFusion's
    patches cross between stages in the estimate's point-to-point time."""
    timeline = Timeline()
    if plan.pipefusion == 1:
        now = 0.0
        warm = min(job.steps, DISTRIFUSION_WARMUP) if plan.distrifusion > 1 else 0
        for step in range(job.steps):
            timeline.add(0, "compute", "denoise", now, now + est.compute_s, micro_batch=step)
            now += est.compute_s
            exposed = est.step_s - est.compute_s if step >= warm else _synchronous_comm(est)
            if exposed > 0:
                timeline.add(0, "comm", "exposed comm", now, now + exposed, micro_batch=step)
                now += exposed
        timeline.step_time_s = now
        return timeline
    return _pipefusion(job, plan, est, est.patch_transfer_s, timeline)


def _synchronous_comm(est: DitEstimate) -> float:
    """A warm-up step waits for all of its communication (the estimate's synchronous step, less its compute)."""
    return est.synchronous_s - est.compute_s


def _pipefusion(job: DitJob, plan: DitPlan, est: DitEstimate, transfer_s: float, timeline: Timeline) -> Timeline:
    """Patch by patch (module docstring); the first stage also waits for the last stage's output of the same patch
    one step earlier (the updated latent it denoises next)."""
    stages, patches = plan.pipefusion, plan.patches
    per_patch = est.compute_s / patches
    kernel = Kernel()
    order = [(t, j) for t in range(job.steps) for j in range(patches)]
    ready: dict[tuple[int, int], float] = {}  # (stage, index) -> when its input is there
    done = [-1] * stages  # the latest index each stage finished
    free = [0.0] * stages
    started: set[tuple[int, int]] = set()

    def try_start(stage: int, index: int) -> None:
        if (stage, index) in started or index >= len(order) or done[stage] != index - 1:
            return
        step = order[index][0]
        if (stage > 0 or step > 0) and (stage, index) not in ready:
            return  # its input has not been sent yet
        started.add((stage, index))
        start = max(free[stage], ready.get((stage, index), 0.0))
        kernel.at(start, lambda: run(stage, index))

    def run(stage: int, index: int) -> None:
        step, patch = order[index]
        end = kernel.now + per_patch
        free[stage] = end
        timeline.add(stage, "compute", "denoise", kernel.now, end, micro_batch=step, chunk=patch)
        kernel.at(end, lambda: finish(stage, index))

    def finish(stage: int, index: int) -> None:
        done[stage] = index
        if stage + 1 < stages:
            ready[(stage + 1, index)] = kernel.now + transfer_s
            kernel.at(kernel.now + transfer_s, lambda: try_start(stage + 1, index))
        elif index + patches < len(order):  # the updated latent of this patch goes back to the first stage
            ready[(0, index + patches)] = kernel.now + transfer_s
            kernel.at(kernel.now + transfer_s, lambda: try_start(0, index + patches))
        try_start(stage, index + 1)

    try_start(0, 0)
    kernel.run()
    timeline.step_time_s = max(free)
    return timeline

