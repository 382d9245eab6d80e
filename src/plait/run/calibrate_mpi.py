"""All-reduce by MPI beside gloo's on this machine (``plait calibrate --backends``), fitted to alpha-beta.

torch.distributed's PyPI wheels carry no MPI back-end, so MPI is timed by mpi4py's ``Allreduce`` on numpy
buffers, its ranks started by the ``mpiexec`` of the ``mpich`` wheel (the optional ``mpi`` extra); gloo's times come
from the same sweep ``plait calibrate`` describes the machine with (:func:`plait.run.calibrate.collective_times`).
Each time is the median of several rounds of back-to-back calls, as the gloo sweep takes them.

Fit: the Hockney model ``t(m) = alpha + m / B`` (Hockney 1994, "The communication challenge for MPP: Intel Paragon
and Meiko CS-2", Parallel Computing 20(3)), least squares on relative error over the measured sizes; ``B`` is buffer bytes per second,
and the bus bandwidth nccl-tests reports is ``2 (g - 1) / g * B`` for an all-reduce over ``g`` ranks.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from plait.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class AlphaBeta:
    """One back-end's all-reduce on this machine, fitted."""

    backend: str
    """``gloo`` or ``mpi``."""
    ranks: int
    """Ranks in the all-reduce."""
    alpha_s: float
    """Fitted time of an empty all-reduce, s."""
    buffer_bytes_per_s: float
    """Fitted buffer bytes per second (``1 / beta``)."""
    sizes_bytes: tuple[int, ...]
    """Buffer sizes measured."""
    times_s: tuple[float, ...]
    """Median time of one all-reduce at each size."""

    @property
    def bus_bytes_per_s(self) -> float:
        """Bus bandwidth of the fit, as nccl-tests states it for an all-reduce (``2 (g-1)/g`` of the buffer)."""
        return 2 * (self.ranks - 1) / self.ranks * self.buffer_bytes_per_s


def fit_alpha_beta(backend: str, ranks: int, sizes: list[int], times: list[float]) -> AlphaBeta:
    """``t = alpha + beta m`` fitted by least squares on relative error (weights ``1 / t^2``), so that the
    latency-bound small sizes weigh as much as the bandwidth-bound large ones (module docstring)."""
    n = len(sizes)
    if n < 2 or len(times) != n or min(times) <= 0:
        raise ConfigError(f"an alpha-beta fit needs >= 2 sizes with a positive time each, got {n} sizes, times {times}")
    w = [1 / t**2 for t in times]
    sw, swm, swt = sum(w), sum(a * m for a, m in zip(w, sizes)), sum(a * t for a, t in zip(w, times))
    swmm = sum(a * m * m for a, m in zip(w, sizes))
    swmt = sum(a * m * t for a, m, t in zip(w, sizes, times))
    det = sw * swmm - swm**2
    beta = (sw * swmt - swm * swt) / det
    alpha = (swt - beta * swm) / sw
    return AlphaBeta(backend=backend, ranks=ranks, alpha_s=max(alpha, 0.0),
                     buffer_bytes_per_s=1 / beta if beta > 0 else float("inf"),
                     sizes_bytes=tuple(sizes), times_s=tuple(times))


def mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else on ``PATH``; ``None`` without mpi4py."""
    if importlib.util.find_spec("mpi4py") is None:
        return None
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def mpi_allreduce_times(ranks: int, sizes: list[int], rounds: int, timeout_s: float = 300.0) -> list[float]:
    """Median seconds of one ``MPI_Allreduce`` (sum, float32) of each buffer size over ``ranks`` local ranks."""
    launcher = mpiexec()
    if launcher is None:
        raise ConfigError("MPI needs mpi4py and an mpiexec: pip install 'plait[mpi]' (the mpich and mpi4py wheels)")
    command = [launcher, "-n", str(ranks), sys.executable, "-m", "plait.run.calibrate_mpi", str(rounds),
               *map(str, sizes)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise ConfigError(f"mpiexec failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    return [float(t) for t in json.loads(done.stdout.strip().splitlines()[-1])]


SIZES_BYTES = [2**12, 2**16, 2**20, 2**22, 2**24]
"""Buffer sizes both back-ends are timed at: 4 KiB (latency-bound) to 16 MiB (bandwidth-bound)."""


def compare_backends(ranks: int, tmp: Path, rounds: int = 5) -> list[AlphaBeta]:
    """gloo's all-reduce and, where mpi4py and mpiexec are installed, MPI's, on :data:`SIZES_BYTES`, fitted."""
    from plait.run.calibrate import collective_times  # torch: only where gloo is timed

    found = [fit_alpha_beta("gloo", ranks, SIZES_BYTES,
                            collective_times(ranks, SIZES_BYTES, tmp, rounds=rounds)["all_reduce"])]
    if mpiexec() is not None:
        found.append(fit_alpha_beta("mpi", ranks, SIZES_BYTES, mpi_allreduce_times(ranks, SIZES_BYTES, rounds)))
    return found


def side_by_side(fits: list[AlphaBeta]) -> list[str]:
    """The fits as text lines: each size's time per back-end, then alpha and the bus bandwidth."""
    lines = ["bytes      " + "".join(f"{f.backend:>14}" for f in fits)]
    for i, size in enumerate(fits[0].sizes_bytes):
        lines.append(f"{size:<11}" + "".join(f"{f.times_s[i] * 1e6:>11.1f} us" for f in fits))
    lines.append("alpha      " + "".join(f"{f.alpha_s * 1e6:>11.1f} us" for f in fits))
    lines.append("bus bw     " + "".join(f"{f.bus_bytes_per_s / 1e9:>9.3f} GB/s" for f in fits))
    return lines


def _sweep(rounds: int, sizes: list[int]) -> None:
    """One MPI rank: time ``Allreduce`` at each size; rank 0 prints the medians as one JSON line."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    medians = []
    for size in sizes:
        send = np.ones(max(size // 4, 1), dtype=np.float32)
        recv = np.empty_like(send)
        iterations = int(min(50, max(5, 2e8 // max(size, 1))))  # as the gloo sweep: the same on every rank
        comm.Allreduce(send, recv)
        taken = []
        for _ in range(rounds):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                comm.Allreduce(send, recv)
            taken.append((time.perf_counter() - start) / iterations)
        medians.append(statistics.median(taken))
    if comm.Get_rank() == 0:
        print(json.dumps(medians), flush=True)


if __name__ == "__main__":
    _sweep(int(sys.argv[1]), [int(x) for x in sys.argv[2:]])
