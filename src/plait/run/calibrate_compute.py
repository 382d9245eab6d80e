"""The compute half of ``plait calibrate``: matmul, attention, copy and pointwise figures, timed as a step runs them.

Every figure is timed on all the calibrated ranks at once (:func:`compute_figures`), on operands rotated through
a pool larger than the last-level cache (:func:`operand_pool`). The peak of a dtype is the best throughput
measured; curves are fractions of it (:mod:`plait.run.calibrate` writes them).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from plait.cost.host import BACKWARD_KERNELS_PER_FORWARD
from plait.cost.layer import eager_rmsnorm_bytes_per_element
from plait.run.bulk_sampler import adjacency, replicated_rows, sample_bulk
from plait.run.graph import generate
from plait.run.model import apply_rope, rope_tables
from plait.run.sampler import draw_seeds, sample
from plait.units import GB


def _timeit(fn, min_time_s: float = 0.2, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    """Median seconds per call of ``fn`` over ``repeats`` rounds of at least ``min_time_s``."""
    fn()
    rounds = []
    for _ in range(repeats):
        count, start = 0, time.perf_counter()
        while True:
            fn()
            count += 1
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            if elapsed >= min_time_s:
                break
        rounds.append(elapsed / count)
    return statistics.median(rounds)


def core_share(device: str, seconds: float = 0.5, n: int = 256) -> float:
    """The fraction of a core this thread gets while it multiplies ``n x n`` matrices for ``seconds``: its CPU time
    (``time.thread_time``) over the wall time. 1 on a core nothing else wants; below, other processes ran there, and
    every wall-clock figure timed beside it is that much slower than the machine would be alone (on this 2-core host
    under load 14-25, 2026-12-06, wall-clock fp32 matmul rates of two ranks at once moved 8.7x between three runs,
    CPU-time rates within 10% per size: ``python benchmarks/calibration_clocks.py``). 1.0 on a GPU, whose host thread
    waits on the device."""
    if device != "cpu":
        return 1.0
    a, b = torch.randn(n, n), torch.randn(n, n)
    wall, cpu = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall < seconds:
        torch.mm(a, b)
    return min(1.0, (time.thread_time() - cpu) / (time.perf_counter() - wall))


def matmul_curve(dtype: torch.dtype, sizes: list[int], device: str, transposed: bool = False,
                 pool_bytes: int = 0, sync: Callable[[], None] = lambda: None) -> list[float]:
    """TFLOP/s of square ``n x n`` matmuls; ``transposed``: ``a.t() @ b``, the layout of a weight gradient.
    Operands rotate through a pool of ``pool_bytes`` (:func:`operand_pool`); ``sync`` runs before each size."""
    out = []
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        pool = itertools.cycle(operand_pool((a, torch.randn(n, n, device=device).to(dtype)), pool_bytes))

        def product() -> None:
            a, b = next(pool)
            torch.mm(a.t() if transposed else a, b)

        sync()
        out.append(2 * n**3 / _timeit(product) / 1e12)
    return out


def copy_bandwidth_gb_per_s(device: str, mib: int) -> float:
    """Bytes read plus written per second by a large tensor copy."""
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _timeit(lambda: dst.copy_(src)) / GB


def last_level_cache_bytes(device: str) -> int:
    """Bytes of the device's last-level cache: a GPU's L2 (CUDA device properties), a CPU's highest cache level
    that Linux lists for CPU 0 (``/sys/devices/system/cpu/cpu0/cache``); 0 where neither says."""
    if device == "cuda":
        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
    best = (0, 0)
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        best = max(best, (level, int(size.rstrip("KMG") or 0) * scale))
    return best[1]


POOL_CAP_BYTES = 256 * 2**20
"""Assumed: bounds calibrate's memory and time per rank. A rotation this long already evicts a core's private
cache hundreds of times over and most of a shared last-level cache."""


def pool_bytes_per_rank(device: str, ranks: int) -> int:
    """Operand bytes each rank rotates through: twice the last-level cache (a CPU's is shared by the ranks, so
    its share; a GPU's is its own), at most :data:`POOL_CAP_BYTES`."""
    cache = last_level_cache_bytes(device)
    return min(2 * cache // (ranks if device == "cpu" else 1), POOL_CAP_BYTES)


def operand_pool(first: Any, pool_bytes: int) -> list[Any]:
    """``first`` (a tensor or a tuple of them) and copies of it, ``pool_bytes`` in all (at least one set).

    A training step never reads its operands from a warm cache: each kernel reads tensors written many kernels
    before, out of a working set (every layer's saved activations, weights, gradients, optimizer state) far
    larger than the caches. Timing a kernel on one set of operands again and again measures the cache instead;
    rotating through a pool larger than the last-level cache measures the kernel as a step runs it."""
    sets = first if isinstance(first, tuple) else (first,)
    size = sum(t.numel() * t.element_size() for t in sets)
    copies = [sets] + [tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in sets)
                       for _ in range(max(0, pool_bytes // max(size, 1) - 1))]
    return copies if isinstance(first, tuple) else [c[0] for c in copies]


def attention_curve(dtype: torch.dtype, seqs: list[int], device: str, pool_bytes: int = 0,
                    sync: Callable[[], None] = lambda: None) -> list[float]:
    """TFLOP/s of causal SDPA forward+backward (FLOPs counted as the estimator does: causal half, bwd 2.5x),
    on operands rotated through a pool of ``pool_bytes`` (:func:`operand_pool`).

    On a GPU the shapes are FlashAttention-2's benchmark (Dao 2023, Sec. 4.1: head dim 128, hidden 2048,
    16k tokens per batch), so the curve is comparable with the published ones; a CPU uses 4 heads of 64."""
    out = []
    heads, dim = (4, 64) if device == "cpu" else (16, 128)
    for s in seqs:
        batch = 1 if device == "cpu" else max(1, 16384 // s)
        pool = itertools.cycle(operand_pool(tuple(
            torch.randn(batch, heads, s, dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3)),
            pool_bytes))

        def step() -> None:
            F.scaled_dot_product_attention(*next(pool), is_causal=True).sum().backward()

        flops = 4 * batch * heads * s * s * dim * 0.5 * 3.5
        sync()
        out.append(flops / _timeit(step) / 1e12)
    return out


def elementwise_fraction(device: str, copy_gb_per_s: float, tokens: int = 1024, hidden: int = 256,
                         ffn: int = 768, head_dim: int = 64, dtype: torch.dtype = torch.bfloat16,
                         pool_bytes: int = 0) -> float:
    """Fraction of copy bandwidth the memory-bound ops of a layer reach, forward and backward, counting bytes as
    the cost model counts them for an eager framework (bf16; the backward charged at twice the forward): two
    RMSNorms run op by op (:func:`plait.cost.layer.eager_rmsnorm_bytes_per_element`), two residual adds (read 2,
    write 1), SwiGLU as silu then multiply (read 1 write 1, read 2 write 1), and ``plait run``'s rotary
    embedding of 4 query and 2 key heads (read and write each element, plus the 16 bytes per element of an
    unfused rotation). Timing the backward too puts eager autograd's own cost into the figure the model uses.
    The ops run in ``dtype``, the one the run computes in: a CPU that trains bf16 plans in fp32 moves twice the
    bytes counted, and the fraction says so. Operands rotate through a pool of ``pool_bytes``
    (:func:`operand_pool`)."""
    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)

    pool = itertools.cycle(operand_pool((leaf(tokens, hidden), leaf(tokens, hidden), leaf(tokens, ffn),
                                         leaf(tokens, ffn), leaf(1, tokens, 4, head_dim), leaf(1, tokens, 2, head_dim)),
                                        pool_bytes))
    cos, sin = (t.to(device) for t in rope_tables(head_dim, tokens))
    norm = torch.nn.RMSNorm(hidden, device=device, dtype=dtype)
    def ops() -> None:
        inputs = next(pool)
        x, y, g, u, q, k = inputs
        outs = (norm(x), norm(y), x + y, y + x, F.silu(g) * u, apply_rope(q, cos, sin), apply_rope(k, cos, sin))
        torch.autograd.grad(outs, inputs, [torch.ones_like(o) for o in outs])

    rotated = tokens * (4 + 2) * head_dim
    counted = (2 * eager_rmsnorm_bytes_per_element(2) * tokens * hidden + 2 * (3 * 2 * tokens * hidden)
               + (2 + 3) * 2 * tokens * ffn + (2 * 2 + 16) * rotated)
    return min(1.0, 3 * counted / _timeit(ops) / GB / copy_gb_per_s)


def launch_floor_us(device: str) -> float:
    """Microseconds of a one-element add."""
    x = torch.zeros(1, device=device)
    return _timeit(lambda: x.add_(1.0)) * 1e6


DISPATCH_CHAIN_OPS = 100
"""Forward ops of the chain :func:`dispatch_us` times (any length long enough that the backward call's own fixed
cost is small next to the chain's)."""


def dispatch_us(device: str, repeats: int = 7) -> float:
    """Host microseconds to issue one kernel of a training step from eager PyTorch: a chain of
    :data:`DISPATCH_CHAIN_OPS` one-element multiplies by leaves that require gradients, forward then backward,
    timed whole (the median of ``repeats`` rounds) and divided by its kernels, one per op forward and two backward
    (the input's and the weight's gradient: :data:`plait.cost.host.BACKWARD_KERNELS_PER_FORWARD`, as the host
    stream counts a layer's). On one-element operands the arithmetic is negligible: what is timed is the Python
    call, the dispatcher, autograd's bookkeeping and the autograd engine, per kernel."""
    weights = [torch.ones(1, device=device, requires_grad=True) for _ in range(DISPATCH_CHAIN_OPS)]
    start = torch.ones(1, device=device, requires_grad=True)

    def chain() -> None:
        h = start
        for w in weights:
            h = h * w
        h.backward()

    kernels = DISPATCH_CHAIN_OPS * (1 + BACKWARD_KERNELS_PER_FORWARD)
    return _timeit(chain, min_time_s=0.05, repeats=repeats) / kernels * 1e6


SAMPLER_GRAPH = {"nodes": 50_000, "edges": 500_000, "exponent": 2.2}
"""The generated graph plait's sampler is timed on (a power-law graph of mean degree 20; any such graph serves:
the figure is per neighbour slot scanned)."""


SAMPLER_BULK = 8
"""Batches per bulk the matrix sampler is timed with."""


def sampling_ns_per_slot(device: str, batch: int = 256, fanouts: tuple[int, ...] = (10, 5),
                         sync: Callable[[], object] = lambda: None) -> tuple[float, float]:
    """Nanoseconds plait's CPU neighbour samplers spend per neighbour slot they scan (the degrees of the nodes that
    draw: every node of a batch but the last hop's new ones): one batch at a time, and in matrix-based bulks of
    :data:`SAMPLER_BULK`; zeros on a GPU, whose samplers are costed otherwise. ``sync`` is called once the graph is
    built, so that ranks time their sampling together."""
    if device != "cpu":
        return 0.0, 0.0

    graph = generate(SAMPLER_GRAPH["nodes"], SAMPLER_GRAPH["edges"], 1, 1, 2, exponent=SAMPLER_GRAPH["exponent"])
    degrees, gen = graph.degrees(), torch.Generator().manual_seed(0)
    rows_of = replicated_rows(adjacency(graph.rowptr_N1, graph.col_E2, graph.nodes))
    scanned = lambda b: int(degrees[b.nodes_U[: b.nodes_U.numel() - b.new_per_hop[-1]]].sum())  # noqa: E731
    sync()
    loop, bulk = [], []
    for _ in range(8):
        seeds = draw_seeds(0, graph.nodes, batch, gen)
        start = time.perf_counter()
        drawn = sample(graph.rowptr_N1, graph.col_E2, seeds, fanouts, gen)
        loop.append((time.perf_counter() - start) / scanned(drawn))
    for _ in range(3):
        gens = [torch.Generator().manual_seed(int(torch.randint(1 << 30, (1,), generator=gen)))
                for _ in range(SAMPLER_BULK)]
        seeds_list = [draw_seeds(0, graph.nodes, batch, g) for g in gens]
        start = time.perf_counter()
        drawn_list = sample_bulk(rows_of, graph.nodes, seeds_list, fanouts, gens)
        bulk.append((time.perf_counter() - start) / sum(scanned(b) for b in drawn_list))
    return statistics.median(loop) * 1e9, statistics.median(bulk) * 1e9


def _compute_rank(rank: int, barrier: Any, queue: Any, threads: int, sizes: list[int], seqs: list[int],
                  half_name: str, pool_bytes: int) -> None:
    """One rank of :func:`compute_figures`: every figure timed while the other ranks time the same one."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(threads)  # as each rank runs under torchrun (OMP_NUM_THREADS=1)
    half = getattr(torch, half_name)

    def stage(name: str) -> None:
        barrier.wait()
        if rank == 0:
            queue.put(("stage", name))

    stage("matmul throughput (fp32" + (", bf16)" if half is torch.bfloat16 else "; bf16 runs as fp32 here)"))
    fp32 = matmul_curve(torch.float32, sizes, device, pool_bytes=pool_bytes, sync=barrier.wait)
    bf16 = (matmul_curve(half, sizes, device, pool_bytes=pool_bytes, sync=barrier.wait) if half is torch.bfloat16
            else fp32)
    wgrad = matmul_curve(half, sizes, device, transposed=True, pool_bytes=pool_bytes, sync=barrier.wait)
    barrier.wait()
    share = core_share(device)  # every rank at once, as the figures were timed
    stage("attention throughput")
    attention = attention_curve(half, seqs, device, pool_bytes=pool_bytes, sync=barrier.wait)
    stage("memory bandwidth")
    memory_bw = copy_bandwidth_gb_per_s(device, max(64, pool_bytes // 2**21) if device == "cpu" else 1024)
    barrier.wait()
    memory_fraction = elementwise_fraction(device, memory_bw, dtype=half, pool_bytes=pool_bytes)
    stage("neighbour sampling")
    sampling_ns = sampling_ns_per_slot(device, sync=barrier.wait)
    barrier.wait()
    queue.put(("figures", rank, {"fp32": fp32, "bf16": bf16, "wgrad": wgrad, "attention": attention,
                                 "core_share": share,
                                 "memory_bw": memory_bw, "memory_fraction": memory_fraction,
                                 "launch_us": launch_floor_us(device), "dispatch_us": dispatch_us(device),
                                 "sampling_ns": sampling_ns}))


def compute_figures(ranks: int, threads: int, sizes: list[int], seqs: list[int], half: torch.dtype,
                    say: Callable[[str], None] = lambda stage: None) -> dict[str, Any]:
    """Matmul, attention and memory figures timed on ``ranks`` processes at once, each figure the median over
    the ranks. The ranks of a job run together, and on a CPU they share its memory system and last-level cache:
    a figure timed by one process alone is one the job never sees (two ranks copy at 67-78% of the rate of one
    alone here: measured by timing ``copy_bandwidth_gb_per_s`` in one and in two processes side by side,
    2026-12-02).
    Operands rotate through :func:`pool_bytes_per_rank`."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    context = mp.get_context("spawn")
    barrier, queue = context.Barrier(ranks), context.Queue()
    pool = pool_bytes_per_rank(device, ranks)
    args = (barrier, queue, threads, sizes, seqs, str(half).removeprefix("torch."), pool)
    processes = [context.Process(target=_compute_rank, args=(rank, *args)) for rank in range(ranks)]
    for process in processes:
        process.start()
    figures: list[dict[str, Any]] = []
    while len(figures) < ranks:
        try:
            message = queue.get(timeout=1.0)
        except Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                for process in processes:
                    process.kill()
                raise RuntimeError("a calibration rank failed while timing compute") from None
            continue
        if message[0] == "stage":
            say(f"{message[1]} on {ranks} ranks at once")
        else:
            figures.append(message[2])
    for process in processes:
        process.join()
    median = lambda values: [statistics.median(v) for v in zip(*values)]  # noqa: E731
    return {key: (median([f[key] for f in figures]) if isinstance(figures[0][key], (list, tuple))
                  else statistics.median(f[key] for f in figures)) for key in figures[0]}
