"""What-if: a step's time if the operators of a layer ran concurrently on one GPU as a spatial pipeline (Kitsune).

Kitsune (Davies, Crago, Sankaralingam and Keckler, "Kitsune: Enabling Dataflow Execution on GPUs", arXiv 2502.18403,
https://arxiv.org/abs/2502.18403) adds inter-CTA ring queues and a heterogeneity-aware grid scheduler to a GPU so
that several operators run at once, each on part of the SMs, passing tiles through on-chip queues instead of HBM; it
reports 1.1-2.4x faster training and 16-42% less off-chip traffic across DLRM, MeshGraphNets, NeRF, GraphCast and
Llama 3 8B (abstract; Table 1), simulated on an A100-class GPU. No GPU sold today has its scheduler change: this is
a **what-if**, never part of plait's prediction.

The cost model times a layer's pass as the sum of its operators' rooflines (:mod:`plait.cost.layer`: each GEMM the
slower of its FLOPs at the sustained rate and its bytes at HBM bandwidth, then the attention core, then the
memory-bound ops). The what-if treats each layer's pass as one fused region whose memory-bound and compute-bound
operators overlap: its time is ``max(sum of compute-bound times, (1 - saved) x all bytes / HBM bandwidth)`` plus
one kernel launch (the per-kernel floor of the prediction's small GEMMs is paid once per region), with
``saved`` the paper's training traffic reduction (16% and 42%: both ends are reported). Compute runs at the same
sustained rates as the prediction (GEMM efficiency curves, flash attention), so only the serialization and the saved
traffic change. The step's compute, its recomputation and its pipeline bubble (which scales with a stage's compute)
shrink by the layer's ratio; exposed communication, optimizer and host time are unchanged (assumed: the embedding
and output head, a few percent of a large model's FLOPs, shrink by the same ratio).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s, roofline_of
from plait.cost.estimate import Estimate
from plait.cost.flops import Gemm, attention_gemms, mlp_block_gemms
from plait.cost.layer import _elementwise_bytes_fwd, attention_part
from plait.cost.setup import Setup
from plait.hardware.figure import Figure, fraction
from plait.packaged import packaged_toml
from plait.schema import build

WHAT_IFS = ("kitsune",)
"""The what-ifs ``plait estimate --what-if`` shows."""


@functools.cache
def traffic_saved() -> tuple[Figure, Figure]:
    """The paper's low and high off-chip traffic reduction in training (``design.toml``)."""
    table = packaged_toml("plait.hardware", "data", "design.toml")["kitsune"]
    return (build(Figure, table["traffic_saved_low"], "design.toml:kitsune.traffic_saved_low"),
            build(Figure, table["traffic_saved_high"], "design.toml:kitsune.traffic_saved_high"))


@dataclass(frozen=True, kw_only=True)
class PassParts:
    """One layer's pass for one micro-batch: the prediction's summed rooflines, and its compute and bytes apart."""

    summed_s: float
    """Sum of per-operator roofline times (the prediction's)."""
    compute_s: float
    """Compute-bound time of its GEMMs and attention core at their sustained rates."""
    bytes_moved: float
    """Bytes its operators move through HBM."""

    launch_s: float
    """One kernel's minimum time (the accelerator's ``kernel_launch_us``): a region is one launch."""

    def fused_s(self, saved: float, bytes_per_s: float) -> float:
        """The pass as one spatial-pipeline region: ``max(compute, (1 - saved) bytes / bandwidth)`` and one
        launch."""
        return max(self.compute_s, (1.0 - saved) * self.bytes_moved / bytes_per_s) + self.launch_s


def _gemm_parts(setup: Setup, m: int, n: int, k: int, count: int, wgrad: bool) -> tuple[float, float, float]:
    """(roofline seconds, compute seconds, bytes) of ``count`` products, as :meth:`_Roofline.time_s` times them."""
    r = roofline_of(setup.cluster.accelerator, setup.gemm_dtype, weight_gradient=wgrad)
    size = 3.0 / (1.0 / m + 1.0 / n + 1.0 / k)
    rate = r.peak_flops * r.curve.at(size)
    rate = rate if r.cap is None else min(rate, r.cap)
    moved = (r.in_bytes * (m * k + k * n) + r.out_bytes * m * n) * count
    return r.time_s(m, n, k, count), 2.0 * m * n * k * count / rate, moved


def layer_passes(setup: Setup, moe_layer: bool) -> tuple[PassParts, PassParts]:
    """Forward and backward of one layer (GEMMs, attention core, memory-bound ops; no collectives)."""
    gemms: list[Gemm] = attention_gemms(setup) + mlp_block_gemms(setup, moe_layer)
    attention = attention_part(setup)
    elem_bytes = _elementwise_bytes_fwd(setup, gemms, moe_layer)
    elem_s = elem_bytes / memory_bytes_per_s(setup.cluster.accelerator)
    fwd = [_gemm_parts(setup, g.m, g.n, g.k, g.count, False) for g in gemms]
    bwd = ([_gemm_parts(setup, g.m, g.k, g.n, g.count, False) for g in gemms]
           + [_gemm_parts(setup, g.k, g.n, g.m, g.count, True) for g in gemms])
    core_fwd, core_bwd = attention.core_fwd_s, attention.core_bwd_s
    launch = setup.cluster.accelerator.efficiency.kernel_launch_us.value * 1e-6
    return (PassParts(launch_s=launch, summed_s=sum(p[0] for p in fwd) + core_fwd + elem_s,
                      compute_s=sum(p[1] for p in fwd) + core_fwd, bytes_moved=sum(p[2] for p in fwd) + elem_bytes),
            PassParts(launch_s=launch, summed_s=sum(p[0] for p in bwd) + core_bwd + 2 * elem_s,
                      compute_s=sum(p[1] for p in bwd) + core_bwd,
                      bytes_moved=sum(p[2] for p in bwd) + 2 * elem_bytes))  # backward: twice the forward's (layer.py)


@dataclass(frozen=True, kw_only=True)
class KitsuneWhatIf:
    """The step as predicted and as it would be with Kitsune's spatial pipelines, at both ends of the paper's
    traffic saving."""

    step_s: float
    """plait's prediction."""
    step_low_saving_s: float
    """The what-if with the paper's lowest traffic saving (16%)."""
    step_high_saving_s: float
    """The what-if with its highest (42%)."""
    layer_ratio: tuple[float, float]
    """Fused over summed layer time (forward + backward), at the low and high saving."""

    @property
    def speedups(self) -> tuple[float, float]:
        """The step's speed-up at the low and the high saving."""
        return self.step_s / self.step_low_saving_s, self.step_s / self.step_high_saving_s


def kitsune_what_if(setup: Setup, estimate: Estimate) -> KitsuneWhatIf:
    """The what-if of ``estimate`` (``setup``: its model, cluster, plan and engine facts)."""
    model = setup.model
    moe = model.num_moe_layers if model.moe else 0
    kinds = [(n, kind) for n, kind in ((model.num_layers - moe, False), (moe, True)) if n]
    parts = [(n, layer_passes(setup, kind)) for n, kind in kinds]
    bandwidth = memory_bytes_per_s(setup.cluster.accelerator)
    t = estimate.time
    steps = []
    ratios = []
    for saved in (fraction(f, f"kitsune {f.source[:20]}") for f in traffic_saved()):
        summed = sum(n * (f.summed_s + b.summed_s) for n, (f, b) in parts)
        fused = sum(n * (f.fused_s(saved, bandwidth) + b.fused_s(saved, bandwidth)) for n, (f, b) in parts)
        summed_fwd = sum(n * f.summed_s for n, (f, _) in parts)
        fused_fwd = sum(n * f.fused_s(saved, bandwidth) for n, (f, _) in parts)
        ratio, ratio_fwd = fused / summed, fused_fwd / summed_fwd
        saved_s = (1 - ratio) * (t.compute_s + t.pp_bubble_s) + (1 - ratio_fwd) * t.recompute_s
        steps.append(estimate.step_time_s - saved_s)
        ratios.append(ratio)
    return KitsuneWhatIf(step_s=estimate.step_time_s, step_low_saving_s=steps[0], step_high_saving_s=steps[1],
                         layer_ratio=(ratios[0], ratios[1]))
