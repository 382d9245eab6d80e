"""Measure this machine into a hardware description the estimator accepts (``plait calibrate``).

Measured: matmul throughput by size (fp32 and bf16 — fp32 again where this CPU would emulate bf16, since
``plait run`` then trains in fp32: :mod:`plait.run.precision` — and bf16 with the first operand transposed, as a
weight gradient is), HBM/DRAM copy bandwidth and the
fraction of it a layer's memory-bound ops reach, attention (SDPA forward+backward)
throughput by sequence length, the launch floor of a tiny kernel, the host's dispatch time per kernel of a
training step (``host_launch_us``; a CPU is also described as running ops synchronously), a rank's memory
footprint after start-up, the physical cores its processes may share, and all-reduce bus bandwidth by message
size between ranks of the backend in use (gloo on CPU, NCCL on GPU), each of all-reduce, all-gather and reduce-scatter
(gloo's reduce-scatter is far slower than its all-reduce), each size's bus bandwidth over the time left after the
latency steps the cost model charges (:func:`bus_bandwidths`); the description names the library the collectives
were timed on (``collective_backend``: gloo on a CPU, NCCL on a GPU), so that a CPU cluster's small collectives cost
the measured alpha-beta, not NCCL's LL protocol. Each figure's source reads "measured by plait calibrate on <date>".
The peak of a dtype is the best throughput measured; curves are fractions of it. The compute figures are
timed in :mod:`plait.run.calibrate_compute`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from plait.hardware.catalog import cluster_from_mapping
from plait.hardware.eager_dispatch import CALIBRATED_DISPATCH
from plait.hardware.net_curves import bus_factor, net_busbw
from plait.run.calibrate_compute import compute_figures
from plait.run.host_cores import host_cores
from plait.run.lifecycle import exit_without_teardown
from plait.run.overheads import host_figures, measure_layers
from plait.run.precision import cpu_runs_natively
from plait.run.train import resident_bytes
from plait.units import GB

ROUNDS = 5
SYNCHRONOUS_CPU = ("PyTorch docs, CUDA semantics, 'Asynchronous execution' (https://pytorch.org/docs/stable/notes/cuda.html"
                   "#asynchronous-execution): it is GPU operations that are enqueued and run later; TensorFlow's "
                   "SyncDevice docs say the same of TensorFlow ('Only GPU ops are asynchronous', https://www.tensorflow"
                   ".org/api_docs/python/tf/raw_ops/SyncDevice). A CPU op runs inside its call: the host issues the "
                   "next op once this one has run")
# Single-tensor collectives: the names PyTorch 2.13 prefers, the older ones before (same (output, input) order).
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def sweep_backend() -> str:
    """The torch.distributed back-end the sweep times collectives on, and so the library the written tiers describe
    (``collective_backend``): NCCL on GPUs, gloo on CPUs."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def collective_sweep(rank: int, world: int, port: int, sizes: list[int], out_path: str,
                       measure_layers_too: bool, rounds_per_size: int = ROUNDS, max_iterations: int = 50) -> None:
    """One rank of the collective sweep; ``MASTER_ADDR`` (default this host) may name another host, so that a
    sweep between two machines or network namespaces measures the link between them."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    backend = sweep_backend()
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = "cuda" if backend == "nccl" else "cpu"
    layers = None
    if device == "cpu" and world == 2 and measure_layers_too:  # also loads what a first model and step load
        import plait.run.worker  # noqa: F401  everything a rank of ``plait run`` imports

        layers = measure_layers() if rounds_per_size == ROUNDS else measure_layers(repeats=5)
    dist.barrier()
    # A rank's footprint with the runtime loaded (and, above, its tiny models built and trained: ~300 modules
    # more load with the first model), before the sweep's own buffers; only the describing sweep records it.
    baseline_bytes = resident_bytes() if device == "cpu" else torch.cuda.memory_reserved()
    times: dict[str, list[float]] = {"all_reduce": [], "all_gather": [], "reduce_scatter": []}
    for size in sizes:
        full = torch.ones(max(size // 4, world), dtype=torch.float32, device=device)
        full = full[: full.numel() // world * world]
        shard = torch.ones(full.numel() // world, dtype=torch.float32, device=device)
        calls = {"all_reduce": lambda full=full: dist.all_reduce(full),
                 "all_gather": lambda full=full, shard=shard: _ALL_GATHER(full, shard),
                 "reduce_scatter": lambda full=full, shard=shard: _REDUCE_SCATTER(shard, full)}
        iterations = int(min(max_iterations, max(5, 2e8 // max(size, 1))))  # the same on every rank: no deadlock
        for kind, call in calls.items():
            call()
            rounds = []
            for _ in range(rounds_per_size):  # the median of several rounds: a 2-core machine is noisy
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iterations):
                    call()
                if device == "cuda":
                    torch.cuda.synchronize()
                rounds.append((time.perf_counter() - start) / iterations)
            times[kind].append(statistics.median(rounds))
    overlap = _overlap_fraction(device)
    if rank == 0:
        Path(out_path).write_text("\n".join(" ".join(map(str, times[k])) for k in times))
        if measure_layers_too:
            Path(out_path + ".rss").write_text(str(baseline_bytes))
        Path(out_path + ".overlap").write_text(str(overlap))
        if layers is not None:
            Path(out_path + ".layers").write_text(json.dumps(layers))
    dist.barrier()
    dist.destroy_process_group()
    exit_without_teardown(0)


def _overlap_fraction(device: str) -> float:
    """How much of an all-reduce hides under a concurrent matmul: (alone + alone - together) / shorter.

    Run on every rank with the same iteration counts (collective calls must match)."""
    n = 512 if device == "cpu" else 4096
    a = torch.randn(n, n, device=device)
    t = torch.ones(2**22, device=device)

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        dist.barrier()
        start = time.perf_counter()
        for _ in range(5):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / 5

    def both() -> None:
        work = dist.all_reduce(t, async_op=True)
        torch.mm(a, a)
        work.wait()

    compute, comm = timed(lambda: torch.mm(a, a)), timed(lambda: dist.all_reduce(t))
    together = timed(both)
    return float(min(1.0, max(0.0, (compute + comm - together) / min(compute, comm))))


def collective_times(world: int, sizes: list[int], tmp: Path, layers: bool = False,
                     rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Seconds per all-reduce, all-gather and reduce-scatter of each full-buffer size between ``world``
    local ranks (with ``layers``, rank 0 also records its footprint after start-up in ``allreduce.txt.rss``)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp / "allreduce.txt"
    mp.start_processes(collective_sweep, args=(world, port, sizes, str(out), layers, rounds), nprocs=world,
                       start_method="spawn")
    lines = out.read_text().splitlines()
    return {kind: [float(x) for x in line.split()] for kind, line in zip(("all_reduce", "all_gather", "reduce_scatter"), lines)}


def bus_bandwidths(ranks: int, messages: list[int], times: dict[str, list[float]],
                   latency_us: float) -> tuple[float, dict[str, list[float]]]:
    """(line rate, bus bandwidth per collective and size), GB/s, of the measured seconds ``times`` between ``ranks``.

    The line rate is the best nccl-tests bus bandwidth measured (bus bytes over the whole time). The cost model
    charges a collective its per-step latency and then its bus bytes at the curve's bandwidth (the alpha-beta model
    of Thakur, Rabenseifner & Gropp 2005, Sec. 2; :mod:`plait.cost.collectives`), so each size's bandwidth is taken
    over the time left after the latency steps it charges: alpha + bytes / bandwidth then gives back the measured
    time rather than counting the latency twice. A size measured no slower than its latency steps has no time left
    to read a bandwidth from, and gets the line rate."""
    line = max(bus_factor(k, ranks) * m / t / GB for k in times for m, t in zip(messages, times[k]))  # nccl-tests
    net = {k: [net_busbw(k, ranks, m, t, latency_us * 1e-6) for m, t in zip(messages, times[k])] for k in times}
    return line, {k: [line if b is None else b / GB for b in net[k]] for k in times}


def with_host_stream(accelerator: dict[str, Any], device: str, dispatch_us: float, source: str) -> dict[str, Any]:
    """``accelerator`` (a description's table) with its host stream (:mod:`plait.cost.host`): ``host_launch_us``,
    the measured host time per kernel (:func:`plait.run.calibrate_compute.dispatch_us`, whole eager ops: the
    framework's dispatch included, so ``eager_dispatch_us`` is 0), and, on a CPU, that ops
    run synchronously (:data:`SYNCHRONOUS_CPU`)."""
    efficiency = {**accelerator["efficiency"], "host_launch_us": {"value": round(dispatch_us, 3), "source": source},
                  "eager_dispatch_us": {"value": 0.0, "source": CALIBRATED_DISPATCH}}
    queue = {"asynchronous_launch": False, "asynchronous_launch_source": SYNCHRONOUS_CPU} if device == "cpu" else {}
    return {**accelerator, **queue, "efficiency": efficiency}


def describe_machine(ranks: int, tmp: Path, threads: int = 1,
                     say: Callable[[str], None] = lambda stage: None, quick: bool = False) -> dict[str, Any]:
    """Measure and return a cluster table (accelerator inline) for ``ranks`` local ranks; ``say`` hears each
    stage as it starts. ``quick``: one round per collective size over three sizes, and 5 layer repeats
    instead of 25 — a rougher description in a fraction of the time (its source says so)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(threads)  # as each rank runs under torchrun (OMP_NUM_THREADS=1)
    source = f"measured by plait calibrate on {datetime.date.today().isoformat()}"
    sizes = [128, 256, 512, 1024] if device == "cpu" else [1024, 2048, 4096, 8192]
    # The dtype bf16 plans compute in: bf16, or fp32 on a CPU that would emulate bf16 (plait.run.precision).
    half = torch.bfloat16 if device == "cuda" or cpu_runs_natively("bf16") else torch.float32
    if half is torch.float32:
        source += " (bf16 figures in fp32: plait run trains bf16 plans in fp32 on this CPU)"
    seqs = [128, 256, 512, 1024] if device == "cpu" else [512, 1024, 2048, 4096, 8192, 16384]  # GPU: as FA2 Fig. 4
    measured = compute_figures(ranks, threads, sizes, seqs, half, say)
    if measured["core_share"] < 0.9:  # wall-clock figures of a loaded machine: say so wherever they are used
        source += (f" (ranks got {measured['core_share']:.2f} of a core while timed: other processes were running, "
                   "and the compute figures are that much slower than this machine alone)")
    messages = [2**12, 2**18, 2**24] if quick else [2**12, 2**16, 2**20, 2**22, 2**24, 2**26]
    rounds = 1 if quick else ROUNDS
    if quick:
        source += " (--quick: 1 round per collective size)"
    say(f"collectives between {ranks} ranks, their latency, and per-layer host time")
    # The latency's 8-bytes-per-rank all-reduce is the sweep's first size: the same timed loop in the ranks the sizes
    # use, where a sweep of its own started two more processes (torch's import and gloo's start each time).
    swept = collective_times(ranks, [8 * ranks, *messages], tmp, layers=True, rounds=rounds)
    latency_us = swept["all_reduce"][0] / (2 * (ranks - 1)) * 1e6
    times = {kind: seconds[1:] for kind, seconds in swept.items()}
    line, busbw = bus_bandwidths(ranks, messages, times, latency_us)
    accelerator = _accelerator_table(device, threads, ranks, tmp, sizes, seqs, measured, line, source)
    table = _cluster_table(accelerator, ranks, messages, latency_us, line, busbw, source)
    layers_file = tmp / "allreduce.txt.layers"
    if layers_file.exists():  # CPU: wrapper host time runs in line with every layer
        layers = {k: tuple(v) for k, v in json.loads(layers_file.read_text()).items()}
        for key, value in host_figures(layers, cluster_from_mapping(table, "calibration")).items():
            accelerator["efficiency"][key] = {"value": value, "source": source}
    return table


def _curve(xs: list[int], ys: list[float], peak: float, source: str) -> dict[str, Any]:
    """A measured efficiency curve: each figure over ``peak``, kept within (1e-4, 1]."""
    return {"sizes": xs, "fractions": [round(max(min(y / peak, 1.0), 1e-4), 4) for y in ys], "source": source}


def _accelerator_table(device: str, threads: int, ranks: int, tmp: Path, sizes: list[int], seqs: list[int],
                       measured: dict[str, Any], line: float, source: str) -> dict[str, Any]:
    """The accelerator of the description: its compute curves, memory, launch and host figures as measured, and
    the collectives' overlap and a rank's footprint the sweep's ranks wrote into ``tmp``."""
    fp32, bf16, wgrad, attention = measured["fp32"], measured["bf16"], measured["wgrad"], measured["attention"]
    memory_bw, memory_fraction = measured["memory_bw"], measured["memory_fraction"]
    overlap = float((tmp / "allreduce.txt.overlap").read_text())
    baseline_gib = float((tmp / "allreduce.txt.rss").read_text()) / 2**30  # a rank's footprint before any model
    name = (torch.cuda.get_device_name(0) if device == "cuda"
            else f"CPU ({threads} thread{'s' * (threads > 1)} per rank)")
    fig = lambda v: {"value": v, "source": source}  # noqa: E731
    accelerator = {
        "name": name, "memory_gib": round(_memory_gib(device, ranks), 2),
        "memory_bandwidth_gb_per_s": round(memory_bw, 2),
        "peak_tflops": {"fp32": round(max(fp32), 5), "bf16": round(max(bf16), 5), "fp16": round(max(bf16), 5)},
        "scale_up_link": "shared memory" if device == "cpu" else "measured interconnect",
        "scale_up_bandwidth_gb_per_s": round(line, 3), "pcie_bandwidth_gb_per_s": round(memory_bw, 3),
        "tdp_w": 0.0, "source": source,
        "efficiency": {
            "matmul_bf16": _curve(sizes, bf16, max(bf16), source),
            "matmul_fp8": _curve(sizes, bf16, max(bf16), source),
            "matmul_bf16_wgrad": _curve(sizes, wgrad, max(bf16), source),
            "matmul_fp32": _curve(sizes, fp32, max(fp32), source),
            "attention": _curve(seqs, attention, max(bf16), source), "memory": fig(round(memory_fraction, 4)),
            "kernel_launch_us": fig(round(measured["launch_us"], 3)), "comm_overlap": fig(round(overlap, 3)),
            "runtime_reserved_gib": fig(round(baseline_gib, 4)), "allocator_overhead": fig(0.0),
        },
    }
    accelerator = with_host_stream(accelerator, device, measured["dispatch_us"], source)
    loop_ns, matrix_ns = measured["sampling_ns"]
    if loop_ns > 0:
        accelerator["efficiency"]["sampling_ns_per_slot"] = fig(round(loop_ns, 2))
        accelerator["efficiency"]["matrix_sampling_ns_per_slot"] = fig(round(matrix_ns, 2))
    return accelerator


def _memory_gib(device: str, ranks: int) -> float:
    """A rank's memory: the host's physical memory over the ranks on a CPU, the GPU's own on a GPU."""
    if device == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 / ranks
    return torch.cuda.get_device_properties(0).total_memory / 2**30


def _cluster_table(accelerator: dict[str, Any], ranks: int, messages: list[int], latency_us: float, line: float,
                   busbw: dict[str, list[float]], source: str) -> dict[str, Any]:
    """The cluster around ``accelerator``: one node of ``ranks``, its one tier as the collective sweep measured it."""
    today = datetime.date.today().isoformat()
    return {
        "name": f"this machine ({accelerator['name']}, {ranks} ranks)", "accelerator": accelerator,
        "gpus_per_node": ranks, "scale_up_domain_gpus": ranks,
        # The tiers are this library's own figures: a cluster that names gloo takes no NCCL protocol and no other
        # back-end's view (plait.engine.backends), so the measured alpha-beta is used as is.
        "collective_backend": sweep_backend(),
        "tiers": [{"name": "local", "span_gpus": 1024, "bandwidth_gb_per_s_per_gpu": round(line, 3),
                   "latency_us": round(latency_us, 3),
                   "efficiency": _curve(messages, busbw["all_reduce"], line, source),
                   "all_gather_efficiency": _curve(messages, busbw["all_gather"], line, source),
                   "reduce_scatter_efficiency": _curve(messages, busbw["reduce_scatter"], line, source),
                   "source": source + f" ({ranks} ranks)"}],
        "price_per_gpu_hour_usd": 0.0, "price_source": "not applicable: a local machine",
        "host_memory_gib_per_gpu": accelerator["memory_gib"],
        "host_memory_bandwidth_gb_per_s_per_gpu": accelerator["memory_bandwidth_gb_per_s"],
        "host_memory_bandwidth_source": source, "source": source,
        "host_cores_per_node": host_cores(),
        "host_cores_source": f"measured by plait calibrate on {today} (physical cores this process may run on: "
                             "os.sched_getaffinity, one per core id of /proc/cpuinfo)",
    }
