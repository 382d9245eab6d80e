"""Two tiny data-parallel training jobs time-sharing the same ranks in a crossover manner, on gloo (CPU): each job
alone, then both alternating, one computing while the other's gradient all-reduce is in flight (CrossoverScheduler,
Luo et al., arXiv 2103.07974; the predicted period: :func:`plait.cost.crossover.pair_cost`).

Each job is an MLP of its own width with its own process group over the same ranks (two communicators, as two
Horovod jobs on the same GPUs have), its own data and plain SGD. A step is: the optimizer applies the previous
step's all-reduced gradients, forward and backward on the rank's batch (the same every step): the *compute* phase;
then the all-reduce of the flat gradients: the *synchronization* phase. Alone, the all-reduce is waited for at once,
and the two phases are timed apart (medians over the timed steps). Paired, job A launches its all-reduce
asynchronously and job B computes while it runs, then B launches its own and A computes its next step, and so on:
the measured period is the wall time of one step of each. Each job's losses paired equal its losses alone (the same
operations on the same values, only their timing moves; checked within 1e-5 by the test). Each all-reduce may be
followed by the wire time of an emulated link (:class:`Link`, ``--link-bytes-per-s``).

Rounds alternate solo A, solo B and the pair, so a loaded machine's slow spell lands on each. Rank 0 writes one JSON
object: per round each job's compute and synchronization medians and the pair's period, the predicted period from
the solo phases, and each job's losses alone and paired. Run as ranks (``env://``), e.g.
``torchrun --nproc-per-node 2 -m plait.run.crossover_pair --out pair.json``.

Legend: B batch rows, D a job's width.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from plait.cost.crossover import StepSplit, pair_cost

SEEDS = {"a": 1, "b": 2}
"""Each job's model and data seed."""
LR = 0.05
"""Both jobs' SGD learning rate."""


@dataclass
class TinyJob:
    """One job's model, link and the gradients of its last compute."""

    name: str
    """``a`` or ``b`` (its seeds: :data:`SEEDS`)."""
    model: nn.Module
    """Its MLP, the same on every rank."""
    width: int
    """The MLP's width (D)."""
    batch: int
    """Rows per rank per step (B)."""
    link: Link
    """Where its all-reduce runs."""
    grads: torch.Tensor | None = None
    """The flat gradients of the last compute (summed over ranks once its all-reduce completes)."""


class Link:
    """A job's gradient all-reduce on its own process group, in a thread of its own, followed by the wire time of an
    emulated link: its ring all-reduce bytes (``2 (n - 1) / n`` times the gradients' bytes per rank, Patarasuk &
    Yuan 2009) over ``bytes_per_s``, slept (0: none, loopback only). The sleep stands for the seconds a GPU job's
    NICs move its gradients while the GPU idles; gloo's own loopback all-reduce instead copies and sums on the same
    CPU cores the other job computes on. The two jobs' links share ``wire``: their wire times take turns, as two
    jobs' synchronizations over the same NICs do."""

    def __init__(self, group: dist.ProcessGroup, bytes_per_s: float, wire: threading.Lock) -> None:
        self.group, self.bytes_per_s, self.wire = group, bytes_per_s, wire
        self.pool = ThreadPoolExecutor(max_workers=1)

    def wire_s(self, grads: torch.Tensor) -> float:
        """Seconds the emulated link takes to all-reduce ``grads``."""
        if self.bytes_per_s <= 0:
            return 0.0
        n = dist.get_world_size(self.group)
        return 2 * (n - 1) / n * grads.numel() * grads.element_size() / self.bytes_per_s

    def start(self, grads: torch.Tensor) -> Future[None]:
        """Launch the all-reduce of ``grads`` (summed in place)."""
        return self.pool.submit(self._reduce, grads)

    def _reduce(self, grads: torch.Tensor) -> None:
        dist.all_reduce(grads, group=self.group)
        with self.wire:  # taken after the collective: no rank holds it while it waits for the other rank
            time.sleep(self.wire_s(grads))


def make_job(name: str, width: int, depth: int, batch: int, link: Link) -> TinyJob:
    """A fresh job: the same initial model on every rank (seeded)."""
    torch.manual_seed(SEEDS[name])
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    model = nn.Sequential(*layers)
    return TinyJob(name=name, model=model, link=link, width=width, batch=batch)


def compute(job: TinyJob, rank: int) -> float:
    """Apply the previous step's reduced gradients, then forward and backward on the rank's batch; the loss."""
    if job.grads is not None:
        # plain SGD written out (p -= lr * mean gradient, as torch.optim.SGD without momentum): constructing a
        # torch.optim optimizer first imports torch._dynamo, ~3 s per rank here, longer than the whole emulation
        offset, world = 0, dist.get_world_size(job.link.group)
        with torch.no_grad():
            for p in job.model.parameters():
                n = p.numel()
                p.add_(job.grads[offset: offset + n].view_as(p) / world, alpha=-LR)
                offset += n
    gen = torch.Generator().manual_seed(SEEDS[job.name] * 1_000_003 + rank)  # one batch per rank: the loss falls
    x_BD = torch.randn(job.batch, job.width, generator=gen)
    y_BD = torch.randn(job.batch, job.width, generator=gen)
    job.model.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(job.model(x_BD), y_BD)
    loss.backward()
    job.grads = torch.cat([p.grad.reshape(-1) for p in job.model.parameters()])  # type: ignore[union-attr]
    return float(loss.detach())


def run_solo(job: TinyJob, steps: int, warmup: int, rank: int) -> tuple[list[float], float, float]:
    """``steps`` steps alone: losses, and the median compute and synchronization seconds of the steps after
    ``warmup``."""
    losses, comp, sync = [], [], []
    dist.barrier(job.link.group)
    for step in range(steps):
        t0 = time.perf_counter()
        losses.append(compute(job, rank))
        t1 = time.perf_counter()
        assert job.grads is not None
        job.link.start(job.grads).result()
        t2 = time.perf_counter()
        if step >= warmup:
            comp.append(t1 - t0)
            sync.append(t2 - t1)
    return losses, statistics.median(comp), statistics.median(sync)


def run_paired(a: TinyJob, b: TinyJob, steps: int, warmup: int, rank: int) -> tuple[list[float], list[float], float]:
    """Both jobs alternating for ``steps`` steps each: their losses and the period (wall seconds per step of
    each) over the steps after ``warmup``."""
    losses: dict[str, list[float]] = {"a": [], "b": []}
    pending: dict[str, Future[None] | None] = {"a": None, "b": None}
    dist.barrier(a.link.group)
    start = 0.0
    for step in range(steps):
        if step == warmup:
            start = time.perf_counter()
        for job in (a, b):
            work = pending[job.name]
            if work is not None:
                work.result()  # its synchronization ran while the other job computed
            losses[job.name].append(compute(job, rank))
            assert job.grads is not None
            pending[job.name] = job.link.start(job.grads)
    for work in pending.values():
        assert work is not None
        work.result()
    period = (time.perf_counter() - start) / (steps - warmup)
    return losses["a"], losses["b"], period


def split(compute_s: float, sync_s: float) -> StepSplit:
    """A measured step as the cost model's phases (memory is not compared here: a large placeholder capacity)."""
    return StepSplit(compute_s=compute_s, sync_s=sync_s, peak_bytes=0.0, resident_bytes=0.0, capacity_bytes=1.0)


def main(argv: list[str] | None = None) -> None:
    """One rank of the emulation (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file rank 0 writes")
    parser.add_argument("--steps", type=int, default=12, help="steps of each job per run")
    parser.add_argument("--warmup", type=int, default=2, help="steps not timed")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of solo A, solo B, the pair")
    parser.add_argument("--width-a", type=int, default=768, help="job A's width (D)")
    parser.add_argument("--width-b", type=int, default=512, help="job B's width (D)")
    parser.add_argument("--depth", type=int, default=2, help="linear layers per job")
    parser.add_argument("--batch", type=int, default=64, help="rows per rank per step (B)")
    parser.add_argument("--link-bytes-per-s", type=float, default=0.0,
                        help="emulated link for the all-reduce's wire time (0: loopback gloo only)")
    args = parser.parse_args(argv)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    wire = threading.Lock()
    links = {name: Link(dist.new_group(backend="gloo"), args.link_bytes_per_s, wire) for name in ("a", "b")}
    widths = {"a": args.width_a, "b": args.width_b}
    rounds = []
    for _ in range(args.rounds):
        solo = {n: run_solo(make_job(n, widths[n], args.depth, args.batch, links[n]), args.steps, args.warmup, rank)
                for n in ("a", "b")}
        jobs = [make_job(n, widths[n], args.depth, args.batch, links[n]) for n in ("a", "b")]
        losses_a, losses_b, period = run_paired(jobs[0], jobs[1], args.steps, args.warmup, rank)
        cost = pair_cost(split(*solo["a"][1:]), split(*solo["b"][1:]))
        rounds.append({"solo": {n: {"losses": s[0], "compute_s": s[1], "sync_s": s[2]} for n, s in solo.items()},
                       "paired": {"losses": {"a": losses_a, "b": losses_b}, "period_s": period},
                       "predicted": {"period_s": cost.period_s, "gain": cost.gain, "bound": cost.bound},
                       "one_after_other_s": sum(solo[n][1] + solo[n][2] for n in ("a", "b"))})
    if rank == 0:
        args.out.write_text(json.dumps({"world": dist.get_world_size(), "steps": args.steps,
                                        "link_bytes_per_s": args.link_bytes_per_s, "rounds": rounds}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
