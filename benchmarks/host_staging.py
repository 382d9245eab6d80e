"""The two host costs of a training loop that slices a batch's features into a new tensor and copies it to a GPU
from pageable memory (``feat[ids].to(device)``, DGL's and GNNLab's ``load_subtensor``), on one core of this host:

- **one core's memcpy rate**: the CUDA driver stages a pageable copy through a pinned buffer with the calling
  thread (CUDA Runtime API, "API synchronization behavior"), so the copy runs no faster than one core copies
  memory: timed as ``out.copy_(src)`` into a buffer already touched;
- **first touch of a fresh tensor, per 4 KiB page**: a tensor of more than glibc's largest mmap threshold (32 MiB on
  64-bit) is a fresh mapping at each allocation (``man mallopt``: ``M_MMAP_THRESHOLD``, ``DEFAULT_MMAP_THRESHOLD_MAX``),
  and PyTorch's CPU allocator does not cache it, so writing it faults every page in: timed as ``src.clone()`` minus
  the copy into a touched buffer, over the pages written.

- **one core's gather of random rows into a touched buffer**: ``index_select(table, 0, ids, out=out)`` (a ``memcpy``
  per row) of 640,000 rows of 128 fp16 values (256 bytes: SALIENT's ogbn-papers100M rows, an ogbn-papers100M batch's
  size) from a table of ``--gather-gib`` GiB, far above the last-level cache, as SALIENT's sampler threads gather
  their batches (``fast_sampler.cpp`` ``serial_index``: ``std::copy_n`` a row into a pinned buffer), in bytes
  gathered per second of CPU time.

With ``--widths``, only that gather, at each of several row widths (64 to 1024 bytes: ogbn-products' 200-byte fp16
rows, ogbn-papers100M's 256), and two least-squares fits of its cost a row: a fixed part plus one a byte of the row,
and plus one a byte of the cache lines the row spans.

Beside them, for reference (not used by the cost model): the per-element CPU time of gathering random rows into a
fresh tensor by advanced indexing (``feat[ids]``: PyTorch's element-wise ``index`` kernel) and by ``index_select``
(a ``memcpy`` per row), ``--rows`` rows of 100 fp32 values, 303,000 ids (an ogbn-products batch's size).

CPU time (``time.process_time``, one torch thread) is reported beside wall time, with the load average: on a shared
machine the wall time holds other processes' turns. Prints the medians of ``--repeats`` runs.

    python benchmarks/host_staging.py [--mib 256] [--repeats 9] [--gather-gib 2] [--widths]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

PAGE_BYTES = 4096


def timed(f, repeats: int) -> tuple[float, float]:
    """Median CPU and wall seconds of ``repeats`` calls."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


GATHER_IDS = 640_000
"""Rows one gather copies: about an ogbn-papers100M batch of 1,024 seeds at 15-10-5 (plait's batch, 640 k nodes)."""


def core_gather_s(gib: float, repeats: int) -> float:
    """Median CPU seconds of one thread's ``index_select`` of :data:`GATHER_IDS` random 256-byte rows (128 fp16) from
    a ``gib`` GiB table into a buffer already touched."""
    rows = int(gib * 2**30) // 256
    table = torch.ones(rows, 128, dtype=torch.float16)
    ids = torch.randint(0, rows, (GATHER_IDS,))
    out = torch.empty(GATHER_IDS, 128, dtype=torch.float16)
    torch.index_select(table, 0, ids, out=out)  # touched once
    return timed(lambda: torch.index_select(table, 0, ids, out=out), repeats)[0]


GATHER_WIDTHS_BYTES = (64, 128, 192, 200, 256, 400, 512, 1024)
"""Row widths of the per-width gather: ogbn-products' rows are 200 bytes in fp16 and 400 in fp32 (100 features),
ogbn-papers100M's and ogbn-arxiv's 256 in fp16 (128 features); 192 bytes is three whole cache lines, where 200 spans
four (as 256 does), which tells a cost per byte from one per cache line."""
CACHE_LINE_BYTES = 64
"""x86-64's cache line (Intel 64 and IA-32 Architectures Optimization Reference Manual)."""


def line_bytes(width: int) -> float:
    """Bytes of the cache lines a row of ``width`` bytes spans, averaged over the rows of a line-aligned table (row
    ``i`` starts at ``i * width``; the offsets within a line repeat every ``64 / gcd(width, 64)`` rows)."""
    period = CACHE_LINE_BYTES // math.gcd(width, CACHE_LINE_BYTES)
    spans = [-(-(i * width % CACHE_LINE_BYTES + width) // CACHE_LINE_BYTES) for i in range(period)]
    return CACHE_LINE_BYTES * sum(spans) / period


def gather_cost_per_row(gib: float, repeats: int) -> list[tuple[int, float]]:
    """Median CPU seconds a row of one thread's ``index_select`` of :data:`GATHER_IDS` random rows into a touched
    buffer, at each width of :data:`GATHER_WIDTHS_BYTES` (fp16 rows from a ``gib`` GiB table)."""
    return [(width, _gather_s(width, gib, repeats) / GATHER_IDS) for width in GATHER_WIDTHS_BYTES]


def _gather_s(width: int, gib: float, repeats: int) -> float:
    """Median CPU seconds of one gather of :data:`GATHER_IDS` random ``width``-byte rows (its table freed on
    return)."""
    rows = int(gib * 2**30) // width
    table = torch.ones(rows, width // 2, dtype=torch.float16)
    ids = torch.randint(0, rows, (GATHER_IDS,))
    dest = torch.empty(GATHER_IDS, width // 2, dtype=torch.float16)
    torch.index_select(table, 0, ids, out=dest)  # touched once
    return timed(lambda: torch.index_select(table, 0, ids, out=dest), repeats)[0]


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """``a + b * x`` through (x, seconds a row) points: ``a``, ``b`` and the root-mean-square residual."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(t for _, t in points) / n
    b = sum((x - mx) * (t - my) for x, t in points) / sum((x - mx) ** 2 for x, _ in points)
    a = my - b * mx
    return a, b, math.sqrt(sum((t - a - b * x) ** 2 for x, t in points) / n)


def print_widths(gib: float, repeats: int) -> None:
    """The per-width gather, and its cost a row plus a byte, and a row plus a byte of the cache lines spanned."""
    points = gather_cost_per_row(gib, repeats)
    for width, per_row in points:
        print(
            f"  gather of {width:4d}-byte rows ({line_bytes(width):6.1f} bytes of lines): {per_row * 1e9:6.1f} ns "
            f"a row, {width / per_row / 1e9:.2f} GB/s"
        )
    for name, x in (("a byte of the row", float), ("a byte of its cache lines", line_bytes)):
        a, b, rms = least_squares([(x(w), t) for w, t in points])
        print(f"  least squares per {name}: {a * 1e9:.1f} ns a row + {b * 1e12:.1f} ps, rms {rms * 1e9:.1f} ns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="bytes copied per call, in MiB (above 32 MiB)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--rows", type=int, default=2_449_029, help="rows of the gathered table (ogbn-products')")
    parser.add_argument("--gather-gib", type=float, default=2.0, help="size of the fp16 table one core gathers from")
    parser.add_argument("--widths", action="store_true", help="only the gather, at each of several row widths")
    args = parser.parse_args()
    if args.gather_gib * 2**30 < 256 * GATHER_IDS:  # far above the last-level cache (module docstring)
        parser.error(f"--gather-gib={args.gather_gib} must hold at least {GATHER_IDS:,} rows of 256 bytes")
    torch.set_num_threads(1)
    if args.widths:
        print(
            f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}, one thread, {args.gather_gib} GiB table"
        )
        print_widths(args.gather_gib, args.repeats)
        print(f"load average {os.getloadavg()[0]:.1f} after")
        return
    nbytes = args.mib * 2**20
    src = torch.ones(nbytes // 4)
    out = torch.empty_like(src)
    out.copy_(src)  # touched once: later copies into it fault nothing
    copy_cpu, copy_wall = timed(lambda: out.copy_(src), args.repeats)
    fresh_cpu, fresh_wall = timed(lambda: src.clone(), args.repeats)
    pages = nbytes / PAGE_BYTES
    print(f"load average {os.getloadavg()[0]:.1f}; {args.mib} MiB per call, medians of {args.repeats}, one thread")
    print(
        f"copy into a touched buffer: CPU {copy_cpu * 1e3:.1f} ms (wall {copy_wall * 1e3:.1f}): "
        f"{nbytes / copy_cpu / 1e9:.2f} GB/s of CPU time"
    )
    print(f"copy into a fresh tensor:   CPU {fresh_cpu * 1e3:.1f} ms (wall {fresh_wall * 1e3:.1f})")
    print(
        f"first touch: {(fresh_cpu - copy_cpu) / pages * 1e6:.3f} us of CPU time per 4 KiB page "
        f"(wall {(fresh_wall - copy_wall) / pages * 1e6:.3f})"
    )
    gather_cpu = core_gather_s(args.gather_gib, args.repeats)
    print(
        f"one core's gather of 256-byte rows into a touched buffer: {GATHER_IDS * 256 / gather_cpu / 1e9:.2f} GB/s "
        f"of CPU time ({gather_cpu / GATHER_IDS * 1e9:.1f} ns a row)"
    )
    table = torch.ones(args.rows, 100)
    ids = torch.randint(0, args.rows, (303_000,))
    elements = ids.numel() * 100
    for name, gather in (("feat[ids]", lambda: table[ids]), ("index_select", lambda: table.index_select(0, ids))):
        cpu, wall = timed(gather, args.repeats)
        print(
            f"{name:>13} into a fresh tensor: {cpu / elements * 1e9:.2f} ns of CPU time an element "
            f"(wall {wall / elements * 1e9:.2f})"
        )


if __name__ == "__main__":
    main()
