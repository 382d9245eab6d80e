"""What a torch ``DataLoader`` pays at each epoch's ``iter()`` to fork its workers (``persistent_workers`` off), by
where the parent's memory lives: ``fork()`` copies the page tables of the parent's private memory, and not those of
shared mappings (Linux ``mm/memory.c`` ``copy_page_range``: "Don't copy ptes where a page fault will fill them
correctly. Fork becomes much lighter when there are big shared or private readonly mappings", for every mapping
without an ``anon_vma``, which a ``MAP_SHARED`` mapping never has). PyTorch moves the tensors it pickles for
``torch.multiprocessing`` (``mp.spawn``'s arguments) into shared memory (PyTorch 1.7
``torch/csrc/generic/StorageSharing.cpp``, ``_share_fd_`` and ``_share_filename_``: a storage not yet shared is copied
into a new shared one, then swapped in), and ``Tensor.share_memory_`` does the same.

Measured here: the parent's ``fork()`` with ``--gib`` GiB of private memory (``torch.ones``) and with the same in
shared memory (``.share_memory_()``), and ``iter(DataLoader(num_workers=--workers))`` (the workers forked one after
another) in both cases. Redis's latency page gives 9-13 ms a GB of resident memory for ``fork()`` on physical
machines (https://github.com/antirez/redis-doc/blob/18caa09945d079be04de8fec5b15d8b5b553c25e/topics/latency.md,
"Fork time in different systems": 6.1 GB in 80 ms, 6.9 GB in 62 ms; now at
https://redis.io/docs/latest/operate/oss_and_stack/management/optimization/latency/).

Each figure is printed as the parent's CPU time (``time.thread_time``: the kernel's work for the calling thread,
``fork``'s page-table copy included) beside its wall time; wall times on a shared machine hold other processes'
turns, and ``iter()``'s also the workers' start-up, which runs in the children.

    python benchmarks/fork_page_tables.py [--gib 2] [--workers 5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch
from torch.utils.data import DataLoader

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average


def fork_s(repeats: int) -> tuple[float, float]:
    """Median (CPU, wall) seconds the parent spends in ``os.fork()`` (the child exits at once)."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
        os.waitpid(pid, 0)
    return statistics.median(cpu), statistics.median(wall)


def iter_s(workers: int, repeats: int) -> tuple[float, float]:
    """Median (CPU, wall) seconds of ``iter()`` on a DataLoader of ``workers`` workers (its workers started, no
    batch read)."""
    loader = DataLoader(torch.arange(1000), batch_size=100, num_workers=workers, collate_fn=len)
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        it = iter(loader)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
        del it  # shuts the workers down
    return statistics.median(cpu), statistics.median(wall)


def _ms(pair: tuple[float, float]) -> str:
    """A (CPU, wall) pair of seconds as milliseconds."""
    return f"{pair[0] * 1e3:.1f} ms CPU ({pair[1] * 1e3:.1f} wall)"


def rss_gib(field: str) -> float:
    """This process's ``/proc/self/status`` field ``field`` (RssAnon, RssShmem), GiB."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    return kib / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="memory the parent holds, GiB")
    parser.add_argument("--workers", type=int, default=5, help="DataLoader workers (GNNLab's PyG rows: 5 a GPU)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.gib <= 0 or args.workers < 1 or args.repeats < 1:
        parser.error(f"--gib={args.gib} must be > 0, --workers={args.workers} and --repeats={args.repeats} >= 1")
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    print(f"load average (1, 5, 15 min) {load_average()}; medians of {args.repeats}")
    base_fork, base_iter = fork_s(args.repeats), iter_s(args.workers, args.repeats)
    print(
        f"baseline (RssAnon {rss_gib('RssAnon'):.2f} GiB): fork {_ms(base_fork)}, "
        f"iter() with {args.workers} workers {_ms(base_iter)}"
    )
    held = torch.ones(int(args.gib * 2**30) // 4)
    for kind in ("private", "shared"):
        if kind == "shared":
            held.share_memory_()  # copied into a shared mapping; the private pages are freed
        f, i = fork_s(args.repeats), iter_s(args.workers, args.repeats)
        print(
            f"{args.gib:g} GiB {kind} (RssAnon {rss_gib('RssAnon'):.2f}, RssShmem {rss_gib('RssShmem'):.2f} GiB): "
            f"fork {_ms(f)}, {(f[0] - base_fork[0]) / args.gib * 1e3:+.1f} ms CPU a GiB; iter() {_ms(i)}, "
            f"{(i[0] - base_iter[0]) / args.gib / args.workers * 1e3:+.1f} ms CPU a GiB a worker"
        )
    print(f"load average {load_average()} after")


if __name__ == "__main__":
    main()
