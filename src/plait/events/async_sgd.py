"""Asynchronous SGD through a parameter server, simulated: throughput and the staleness it causes.

Each worker computes a gradient on the parameters it last pulled (``step_s[w]`` seconds), pushes it to the server
through the server's ingress (``push_s`` each, one at a time), the server applies it (``apply_s``, one at a time,
first come first served) and sends the new parameters back through its egress (``pull_s``, one at a time); the
worker then starts again (Downpour SGD, Dean et al., NeurIPS 2012, Sec. 4.1; asynchronous SGD on GPUs, 000-18).
An update's staleness is the number of other updates the server applied between the worker's pull and its own
(Ho et al., NeurIPS 2013, Sec. 2). With a staleness bound ``B`` the server holds a worker's reply while the
worker has finished more than ``B`` iterations beyond the slowest worker (Stale Synchronous Parallel, Ho et al.
2013, Sec. 2: "the fastest and slowest workers must be <= s clocks apart"); ``B = None``: never held.

The server's link and its adder are the shared resources, as in a parameter server whose NIC is the bottleneck
(Jiang et al., OSDI 2020, Sec. 3.1). Runs on :class:`plait.events.kernel.Kernel`, deterministic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from plait.events.kernel import Kernel


@dataclass(frozen=True)
class AsyncRun:
    """What a simulated asynchronous run did."""

    duration_s: float
    """Time until the server applied the last update."""
    updates_by_worker: tuple[int, ...]
    """Updates each worker contributed."""
    staleness: dict[int, float]
    """Fraction of the updates at each staleness."""

    @property
    def updates_per_s(self) -> float:
        """Server updates per second."""
        return sum(self.updates_by_worker) / self.duration_s

    @property
    def mean_staleness(self) -> float:
        """Mean staleness of an update."""
        return sum(k * share for k, share in self.staleness.items())


class _Fifo:
    """One resource that serves requests one at a time, in arrival order."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel, self.free_at = kernel, 0.0

    def serve(self, seconds: float, then) -> None:  # type: ignore[no-untyped-def]
        start = max(self.kernel.now, self.free_at)
        self.free_at = start + seconds
        self.kernel.at(self.free_at, then)


def simulate_async(step_s: Sequence[float], push_s: float, pull_s: float, apply_s: float, bound: int | None,
                   updates: int, until_s: float = math.inf) -> AsyncRun:
    """Simulate ``updates`` server updates (or those applied by ``until_s``) of workers with compute times
    ``step_s`` (module docstring)."""
    kernel = Kernel()
    ingress, adder, egress = _Fifo(kernel), _Fifo(kernel), _Fifo(kernel)
    workers = len(step_s)
    version, finish = [0], [0.0]
    pulled, clock, held = [0] * workers, [0] * workers, []  # type: list[int], list[int], list[int]
    stale: Counter[int] = Counter()

    def start(w: int, snapshot: int) -> None:
        pulled[w] = snapshot
        kernel.at(kernel.now + step_s[w], lambda: ingress.serve(push_s, lambda: adder.serve(apply_s,
                                                                                             lambda: applied(w))))

    def applied(w: int) -> None:
        if version[0] >= updates or kernel.now > until_s:
            return
        stale[version[0] - pulled[w]] += 1
        version[0] += 1
        clock[w] += 1
        finish[0] = kernel.now
        held.append(w)
        for v in list(held):  # release every worker the bound now lets go, in the order they were held
            if bound is None or clock[v] - min(clock) <= bound:
                held.remove(v)
                snapshot = version[0]  # the parameters as the server sends them
                egress.serve(pull_s, lambda v=v, snapshot=snapshot: start(v, snapshot)
                             if version[0] < updates else None)

    for w in range(workers):
        kernel.at(0.0, lambda w=w: start(w, 0))
    kernel.run()
    total = sum(clock)
    return AsyncRun(duration_s=finish[0], updates_by_worker=tuple(clock),
                    staleness={k: n / total for k, n in sorted(stale.items())})
