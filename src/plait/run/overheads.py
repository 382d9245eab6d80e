"""Host-side time per layer of eager PyTorch and of plait's runtime wrappers, measured on a tiny model.

Eager PyTorch dispatches every op of a layer from Python (some 50 forward, more backward);
FSDP2 runs Python hooks around every sharded layer (pre/post forward and backward, copy-in
and copy-out of the flat all-gather buffer) and DTensor tensor parallelism dispatches every
sharded op through sharding propagation. On a GPU this host work runs ahead of the device
and hides behind it for all but tiny layers; on a CPU the device is the host, so it adds to
every layer. It is measured, never assumed: a tiny model (so that arithmetic is negligible)
is timed with 2 and 10 layers, plain and wrapped, on the ranks of ``plait calibrate``; the
per-layer slope (over layers, so embedding and head costs cancel) of the plain model less the
layer's modelled kernels and less the host stream's charge for issuing them (the kernels the cost model counts,
at the ``host_launch_us`` calibrate measures) is the dispatch time the per-kernel count does not explain; the
wrapped models' slopes less the plain one and less what the cost model already charges for the wrapper's
collectives are the wrapper overheads.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from plait.cost.prepared import layer_columns
from plait.engine.catalog import get_engine
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.run.mesh import build_mesh
from plait.run.model import build_model
from plait.run.parallel import parallelize
from plait.run.train import autocast, cross_entropy
from plait.workload.catalog import model_from_mapping
from plait.workload.model import ModelSpec

LAYERS = (2, 10)
SEQ_LEN = 64
"""Tokens per sequence of every calibration model and plan."""
PLANS = {"plain": Plan(global_batch=2, micro_batch=2, seq_len=SEQ_LEN),
         "fsdp": Plan(dp_shard=2, sharding="zero3", global_batch=4, micro_batch=2, seq_len=SEQ_LEN),
         "tp": Plan(tp=2, sp=True, global_batch=2, micro_batch=2, seq_len=SEQ_LEN)}


def tiny_spec(layers: int) -> ModelSpec:
    """A model small enough that its arithmetic is negligible next to per-op host costs."""
    return model_from_mapping({
        "name": f"calibration-{layers}", "num_layers": layers, "hidden_size": 64, "num_heads": 4,
        "num_kv_heads": 2, "head_dim": 16, "ffn_hidden_size": 128, "mlp": "gated", "vocab_size": 64,
        "seq_len": SEQ_LEN, "tied_embeddings": False, "norm": "rmsnorm", "position": "rope",
        "source": "assumed: a toy shape for measuring per-layer host overhead"}, "calibration model")


def _one_pass(model: torch.nn.Module, plan: Plan, x: torch.Tensor) -> tuple[float, float]:
    """Seconds of (forward, forward + backward) of one micro-batch."""
    dist.barrier()
    start = time.perf_counter()
    with autocast(plan, False, "cpu"):
        loss = cross_entropy(model(x), x)
        middle = time.perf_counter()
        loss.backward()
    end = time.perf_counter()
    model.zero_grad(set_to_none=True)
    return middle - start, end - start


def measure_layers(repeats: int = 25) -> dict[str, tuple[float, float]]:
    """Per-layer (forward, backward) seconds of plain, FSDP2 (zero3) and TP2+SP layers on this
    process group (2 ranks; every rank must call it): the slope between the two layer counts of the
    median pass times. The six models are timed round-robin, one pass each per round, so that a slow
    spell of a shared machine falls on all of them rather than on one side of a difference."""
    models: dict[tuple[str, int], torch.nn.Module] = {}
    for name, plan in PLANS.items():
        mesh = build_mesh(plan) if name != "plain" else None
        for n in LAYERS:
            spec = tiny_spec(n)
            model = build_model(spec, spec.seq_len, 0)
            models[name, n] = model if mesh is None else parallelize(model, mesh, plan, full_precision=False)
    shape = tiny_spec(LAYERS[0])  # every layer count shares vocabulary and sequence length
    x = torch.randint(0, shape.vocab_size, (2, shape.seq_len))
    times: dict[tuple[str, int], list[tuple[float, float]]] = {key: [] for key in models}
    for i in range(repeats + 2):
        for key, model in models.items():
            timing = _one_pass(model, PLANS[key[0]], x)
            if i >= 2:  # warm-up rounds
                times[key].append(timing)
    span = LAYERS[1] - LAYERS[0]
    out = {}
    for name in PLANS:
        (f_lo, t_lo), (f_hi, t_hi) = ((statistics.median(f for f, _ in times[name, n]),
                                       statistics.median(t for _, t in times[name, n])) for n in LAYERS)
        out[name] = ((f_hi - f_lo) / span, ((t_hi - f_hi) - (t_lo - f_lo)) / span)
    return out


def host_figures(layers: dict[str, tuple[float, float]], cluster: Cluster) -> dict[str, float]:
    """Microseconds per layer and pass of eager dispatch beyond the layer's modelled kernels and, on a synchronous
    device, the host stream's charge for issuing them (:func:`plait.cost.host.layer_host_s` at the measured
    ``host_launch_us``), and that FSDP2 and TP add beyond what the cost model already charges for their collectives
    (and FSDP2's copies, and the host stream's charge for the kernels they add), on ``cluster`` (the calibrated
    description, before host figures), with the runtime's own engine facts (engine ``plait``)."""
    spec = tiny_spec(LAYERS[0])
    jobs = {name: Job.build(spec, cluster, plan, get_engine("plait")) for name, plan in PLANS.items()}
    charged = {name: layer_columns(job.model, job.cluster, job.plan, job.framework) for name, job in jobs.items()}
    shard = charged["fsdp"][1]  # a forward gathers; a backward gathers again and reduce-scatters
    fsdp_fwd = shard.gather_s + shard.copy_out_s
    fsdp_bwd = fsdp_fwd + shard.reduce_s + shard.copy_in_s
    # The host stream's charge for issuing each layer's kernels: on a synchronous device all of it, layer by layer
    # (plait.cost.host.exposed_host_s); behind a launch queue it is joined per pass, not per layer, and the layers
    # measured here (a CPU's) have none.
    queued = cluster.accelerator.asynchronous_launch
    issue = {name: (0.0, 0.0) if queued else (kind.host_fwd_s, kind.host_bwd_s) for name, (kind, _) in charged.items()}
    fsdp_fwd += issue["fsdp"][0] - issue["plain"][0]
    fsdp_bwd += issue["fsdp"][1] - issue["plain"][1]
    tp_fwd = charged["tp"][0].tp_fwd_s + issue["tp"][0] - issue["plain"][0]
    tp_bwd = charged["tp"][0].tp_bwd_s + issue["tp"][1] - issue["plain"][1]
    kernels_f, kernels_b = (charged["plain"][0].fwd_s + issue["plain"][0],
                            charged["plain"][0].bwd_s + issue["plain"][1])
    (plain_f, plain_b), (fsdp_f, fsdp_b), (tp_f, tp_b) = layers["plain"], layers["fsdp"], layers["tp"]
    us = lambda seconds: round(max(0.0, seconds) * 1e6, 2)  # noqa: E731
    return {"host_layer_fwd_us": us(plain_f - kernels_f), "host_layer_bwd_us": us(plain_b - kernels_b),
            "host_fsdp_layer_fwd_us": us(fsdp_f - plain_f - fsdp_fwd),
            "host_fsdp_layer_bwd_us": us(fsdp_b - plain_b - fsdp_bwd),
            "host_tp_layer_fwd_us": us(tp_f - plain_f - tp_fwd),
            "host_tp_layer_bwd_us": us(tp_b - plain_b - tp_bwd)}
