"""One rank of an asynchronous run: ``async_ps`` and ``easgd`` through dedicated server ranks, or, for
comparison, a synchronous method over the same workers, with optional slowed workers and a wall-time limit.

Ranks ``0..N-1`` are workers, ranks ``N..N+S-1`` servers (``S`` from the spec; one for EASGD). Each server holds one
balanced piece of the flat fp32 parameters (:func:`plait.plan.servers.placement`) and serves whichever worker's
message comes first (``torch.distributed.recv`` from any source):

- ``async_ps:staleness=B``: a worker pushes its gradient piece with the version it computed on; the server steps
  its piece with the workers' optimizer (same class, same learning rate), counts the update's staleness (updates
  applied since that version) and sends the new piece back, holding the reply while the worker is more than ``B``
  iterations ahead of the slowest active worker (Stale Synchronous Parallel, Ho et al., NeurIPS 2013; Downpour SGD,
  Dean et al. 2012); the predicted counterpart is :func:`plait.events.async_sgd.simulate_async`;
- ``param_server:servers=S,host=cpu``: synchronous; a server sums a round's pieces once every worker has pushed
  and sends the mean back, and the workers step their own optimizer (BytePS's servers on CPU machines, Jiang et
  al., OSDI 2020, Sec. 4.1): the all-reduce's mean, summed in another order;
- ``easgd:alpha=A,every=H``: workers step their own optimizer and every ``H`` iterations send their parameters;
  the server moves the centre ``x~ += A (x - x~)`` and returns ``A (x - x~)``, which the worker subtracts
  (asynchronous EASGD, Zhang, Choromanska & LeCun, NeurIPS 2015, Algorithm 2).

Each message carries :data:`plait.cost.servers.HEADER_ELEMENTS` fp32 values after the piece (kind and version). Rank
0 writes, per method given and per worker, each iteration's loss and wall time and the bytes it sent; per server, every update's worker,
staleness and time; each worker's and server's CPU seconds in its loop (``cpu_s``); and the loss of the final model
(the servers' parameters, or worker 0's for the synchronous methods) on a held-out batch; and each iteration's compute (forward, backward and the slowdown, before the
exchange: what :func:`plait.events.async_sgd.simulate_async` takes as a worker's speed), and its peak memory.
``plait run --plan`` starts it for an asynchronous plan (:mod:`plait.run.async_plan`).
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist

from plait.cost.servers import HEADER_ELEMENTS
from plait.plan.servers import placement
from plait.run.config import read_config
from plait.run.counting import counted_bytes
from plait.run.data import global_batch, rank_slice
from plait.run.lifecycle import exit_without_teardown
from plait.run.model import build_model
from plait.run.replica_grads import reduce_gradients
from plait.run.sends import Sends
from plait.run.sites import Reducer
from plait.run.sync import attach
from plait.run.train import cross_entropy, peak_memory_bytes
from plait.run.workload_configs import LEARNING_RATES, AsyncConfig
from plait.sync import SyncMethod, parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes

GRADIENT, ELASTIC, STOP, SUM = 0.0, 1.0, 2.0, 3.0
PUSH, REPLY = 21, 22
HELD_OUT_STEP = 1_000_000
"""The corpus batch the final model is scored on (no run trains that far)."""


def _optimizer(name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    lr = LEARNING_RATES[name]
    return torch.optim.SGD(params, lr=lr) if name == "sgd" else torch.optim.AdamW(params, lr=lr)


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).to(torch.float32) for t in tensors])


def _pieces(model: torch.nn.Module, servers: int) -> list[int]:
    return placement([tuple(p.shape) for p in model.parameters()], servers, "balanced")[1]


def serve(sync: SyncMethod, model: torch.nn.Module, workers: int, index: int, optimizer_name: str) -> dict[str, object]:
    """Server ``index``'s loop until every worker has stopped; returns its updates and final piece."""
    sizes = _pieces(model, sync.server_ranks)
    start = sum(sizes[:index])
    piece = _flat([p.detach() for p in model.parameters()])[start: start + sizes[index]].clone()
    piece.requires_grad_(True)
    optimizer = _optimizer(optimizer_name, [piece])
    buffer = torch.empty(sizes[index] + HEADER_ELEMENTS)
    version, clock, held, active = 0, [0] * workers, [], set(range(workers))  # type: int, list[int], list[int], set[int]
    total, arrived = torch.zeros(sizes[index]), set()  # type: torch.Tensor, set[int]
    updates: list[tuple[int, int, float]] = []
    bound = sync.staleness_bound
    alpha = sync.elastic_force  # EASGD's pushes only
    pending: list[dist.Work] = []
    began, cpu = time.perf_counter(), time.process_time()
    while active:
        worker = dist.recv(buffer, tag=PUSH)
        kind, stamp = float(buffer[-2]), int(buffer[-1])
        if kind == STOP:
            active.discard(worker)
        elif kind == SUM:  # synchronous: the mean once every active worker has pushed (BytePS's summation)
            total += buffer[: sizes[index]]
            arrived.add(worker)
        elif kind == ELASTIC:
            with torch.no_grad():
                diff = alpha * (buffer[: sizes[index]] - piece)
                piece += diff
            pending.append(Sends.isend(torch.cat([diff, torch.tensor([0.0])]), worker, None, REPLY))
        else:
            updates.append((worker, version - stamp, time.perf_counter() - began))
            piece.grad = buffer[: sizes[index]].clone()
            optimizer.step()
            version += 1
            clock[worker] += 1
            held.append(worker)
        if arrived and arrived >= active:
            mean = torch.cat([total / len(arrived), torch.tensor([0.0])])
            pending.extend(Sends.isend(mean, w, None, REPLY) for w in sorted(arrived))
            total, arrived = torch.zeros(sizes[index]), set()
        slowest = min((clock[w] for w in active), default=0)
        for w in list(held):
            if w not in active or bound is None or clock[w] - slowest <= bound:
                held.remove(w)
                if w in active:
                    reply = torch.cat([piece.detach(), torch.tensor([float(version)])])
                    pending.append(Sends.isend(reply, w, None, REPLY))
    for work in pending:
        work.wait()
    return {"updates": updates, "piece": piece.detach().tolist(), "cpu_s": time.process_time() - cpu}


def work(sync: SyncMethod, model: torch.nn.Module, workers: int, group: dist.ProcessGroup,
         args: AsyncConfig) -> dict[str, object]:
    """Worker loop over the workers' ``group``: iterations until ``args.steps`` or ``args.seconds``; returns its
    losses, times and bytes."""
    rank, servers = dist.get_rank(), sync.server_ranks
    params = list(model.parameters())
    sizes = _pieces(model, servers) if servers else []
    optimizer = _optimizer(args.optimizer, params)
    module, optimizer = (model, optimizer) if servers else attach(model, optimizer, sync, parameter_shapes(
        resolve_model(args.model)), Reducer(group))
    versions = [0] * servers
    losses, times, sent, computed = [], [], [], []  # type: list[float], list[float], list[int], list[float]
    slow = args.slow_s
    began, cpu = time.perf_counter(), time.process_time()
    step = 0
    waits = not sync.asynchronous  # workers that wait for each other stop together
    while _continues(step, began, args, group if waits else None):
        inputs, targets = global_batch(step, args.batch, resolve_model(args.model).seq_len)
        inputs, targets = rank_slice(inputs, rank, workers), rank_slice(targets, rank, workers)
        with counted_bytes() as count:
            computing = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):  # as plait run trains bf16
                loss = cross_entropy(module(inputs), targets)
            loss.backward()
            factor = args.slowdown[rank] if args.slowdown else 1.0  # a slower device: (factor - 1) x the passes
            time.sleep(slow.get(rank, 0.0) + (factor - 1.0) * (time.perf_counter() - computing))
            computed.append(time.perf_counter() - computing)
            sync.worker_step(_Worker(optimizer, params, sizes, workers, versions), step)
            optimizer.zero_grad()
        losses.append(float(loss.detach()))
        times.append(time.perf_counter() - began)
        sent.append(count[0])
        step += 1
    for j in range(servers):
        stop = torch.zeros(sizes[j] + HEADER_ELEMENTS)
        stop[-2] = STOP
        Sends.isend(stop, workers + j, None, PUSH).wait()
    return {"losses": losses, "times": times, "bytes": sent, "compute_s": computed,
            "peak_memory_bytes": peak_memory_bytes(), "cpu_s": time.process_time() - cpu}


class _Worker:
    """A worker's exchanges after its backward pass, which the method picks (:class:`plait.sync.hooks.WorkerHooks`)."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], sizes: list[int],
                 workers: int, versions: list[int]) -> None:
        self.optimizer, self.params, self.sizes = optimizer, params, sizes
        self.workers, self.versions = workers, versions

    def reduce_and_step(self) -> None:
        reduce_gradients(self.optimizer)
        self.optimizer.step()

    def push_gradient(self) -> None:
        _exchange(_flat([p.grad for p in self.params]), self.sizes, self.workers, GRADIENT, self.versions, self.params,
                  "replace")

    def push_sum(self) -> None:
        _exchange(_flat([p.grad for p in self.params]), self.sizes, self.workers, SUM, self.versions, self.params,
                  "gradient")
        self.optimizer.step()

    def push_parameters(self) -> None:
        _exchange(_flat([p.detach() for p in self.params]), self.sizes, self.workers, ELASTIC, self.versions,
                  self.params, "subtract")


def _continues(step: int, began: float, args: AsyncConfig, group: dist.ProcessGroup | None) -> bool:
    """Whether a worker starts another iteration: ``args.steps`` of them, or until ``args.seconds``; workers that
    wait for each other (``group``) stop together, when the first of them runs out of time."""
    if not args.seconds:
        return step < args.steps
    going = torch.tensor([float(time.perf_counter() - began < args.seconds)])
    if group is not None:
        dist.all_reduce(going, op=dist.ReduceOp.MIN, group=group)
    return bool(going.item())


def _exchange(flat: torch.Tensor, sizes: list[int], workers: int, kind: float, versions: list[int],
              params: list[torch.Tensor], apply: str) -> None:
    """Send each server its piece (with ``kind`` and the version it was computed on) and apply the replies: the
    new parameters (``replace``), the elastic difference to ``subtract``, or the mean ``gradient``."""
    replace = apply == "replace"
    offset, replies, sends = 0, [], []
    for j, size in enumerate(sizes):
        message = torch.cat([flat[offset: offset + size], torch.tensor([kind, float(versions[j])])])
        sends.append(Sends.isend(message, workers + j, None, PUSH))
        offset += size
    for j, size in enumerate(sizes):
        reply = torch.empty(size + 1)
        dist.recv(reply, workers + j, tag=REPLY)
        versions[j] = int(reply[-1]) if replace else versions[j]
        replies.append(reply[:size])
    for send in sends:
        send.wait()
    merged = torch.cat(replies)
    with torch.no_grad():
        for p, part in zip(params, merged.split([p.numel() for p in params])):
            if replace:
                p.copy_(part.view_as(p))
            elif apply == "gradient":
                p.grad.copy_(part.view_as(p))  # type: ignore[union-attr]
            else:
                p.sub_(part.view_as(p).to(p.dtype))


def held_out_loss(model: torch.nn.Module, flat: torch.Tensor, args: AsyncConfig) -> float:
    """Loss of the parameters ``flat`` on a batch no run trains on."""
    with torch.no_grad():
        for p, part in zip(model.parameters(), flat.split([p.numel() for p in model.parameters()])):
            p.copy_(part.view_as(p))
        inputs, targets = global_batch(HELD_OUT_STEP, args.batch, resolve_model(args.model).seq_len)
        return float(cross_entropy(model(inputs), targets))


def run_case(text: str, workers: int, group: dist.ProcessGroup, args: AsyncConfig) -> dict[str, object] | None:
    """One method from the same initial weights: workers train, its server ranks serve, other ranks wait; rank 0
    returns the result."""
    sync, spec, rank = parse(text), resolve_model(args.model), dist.get_rank()
    servers = sync.server_ranks
    model = build_model(spec, spec.seq_len, seed=0)
    if rank < workers:
        result: dict[str, object] = {"worker": work(sync, model, workers, group, args)}
    elif rank < workers + servers:  # the servers' final pieces are the model where they step it
        result = {"server": serve(sync, model, workers, rank - workers, args.optimizer)}
    else:
        result = {}
    gathered: list[dict[str, object]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, result)
    if rank != 0:
        return None
    served = [g["server"] for g in gathered[workers: workers + servers]]
    pieces = served and sync.servers_hold_model
    final = (torch.tensor([x for s in served for x in s["piece"]]) if pieces  # type: ignore[index]
             else _flat([p.detach() for p in model.parameters()]))
    servers_out = [{"updates": s["updates"], "cpu_s": s["cpu_s"]} for s in served]  # type: ignore[index]
    return {"workers": [g["worker"] for g in gathered[:workers]], "servers": servers_out,
            "held_out_loss": held_out_loss(model, final, args)}


def main(argv: list[str] | None = None) -> int:
    args = read_config(AsyncConfig, argv, prog="plait.run.async_train", description=__doc__)
    dist.init_process_group("gloo")
    torch.use_deterministic_algorithms(True)
    world = dist.get_world_size()
    workers = args.workers or world - max(parse(t).server_ranks for t in args.spec)
    group = dist.new_group(list(range(workers)))  # every rank enters new_group; only the workers use it
    results = {text: run_case(text, workers, group, args) for text in args.spec}
    if dist.get_rank() == 0:
        args.out.write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()
    exit_without_teardown(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
