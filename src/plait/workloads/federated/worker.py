"""The federated toy on torch.distributed (gloo): rank 0 is the server, rank ``i + 1`` client ``i``; PFLEGO and
FedAvg (:mod:`.toy`'s rounds) one after the other. Every round the server sends each selected client the shared
weights (PFLEGO: the body; FedAvg: the whole model), each selected client returns its body gradient (PFLEGO) or its
weights (FedAvg), point to point; the bytes each side sends are counted where they are sent.

To measure the clients' objective every round, the server also sends the body to the clients it did not select and
every rank joins one all-reduce of the clients' losses at the round's start weights, after the round's uploads:
evaluation traffic, counted apart (``eval_bytes``), which a deployed federation would not send. The server times
each round's protocol (``round_s``, ``round_cpu_s``: ``time.perf_counter`` and ``time.thread_time``): from its
first send to its step on the last upload, the evaluation's all-reduce outside; each client its CPU seconds of each
round it was selected in (``client_cpu_s``: receive, compute and upload).

Run: ``python -m torch.distributed.run --nproc-per-node 4 -m plait.workloads.federated.worker --out run.json``
(``--reference 1``: the same federation in one process, :func:`plait.workloads.federated.toy.federate`).

Tensor legend: ``P`` values sent (body, or body and head), ``I`` clients.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from plait.run.config import read_config
from plait.run.gloo_job import run_job
from plait.workloads.federated import toy
from plait.workloads.federated.config import FederatedRunConfig


def _size(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


def _method(config: FederatedRunConfig, method: str) -> dict[str, Any]:
    """One method's federation on this rank; rank 0's result (losses, applied gradients, bytes)."""
    rank, clients = dist.get_rank(), config.clients
    me = rank - 1
    template = toy.init_body(config) + toy.init_head(config, -1)  # shapes; FedAvg's initial model
    head = toy.init_head(config, me) if method == "pflego" else []  # a PFLEGO client's own head
    data = toy.client_data(config, me) if rank else None
    body_values = toy.flat(template[:-1]).numel()
    shared_P = toy.flat(template[:-1] if method == "pflego" else template)  # the server's copy
    down = [0] * clients  # server: protocol bytes sent each client
    up, eval_bytes = torch.zeros(clients, dtype=torch.int64), 0  # clients: protocol bytes each sent
    losses, applied = [], []
    round_s, round_cpu_s = [], []  # the server's: its wall and CPU seconds of each round's protocol
    client_cpu_s: list[float] = []  # a client's: its CPU seconds of each round it was selected in
    for r in range(config.rounds + 1):
        chosen = toy.selected(config, r) if r < config.rounds else []
        start, cpu = time.perf_counter(), time.thread_time()
        if rank == 0:
            for c in range(clients):
                dist.send(shared_P, c + 1)
                down[c] += _size(shared_P) if c in chosen else 0
                eval_bytes += 0 if c in chosen else _size(shared_P)
        else:
            dist.recv(shared_P, 0)
        model = toy.unflat(shared_P, template if method == "fedavg" else template[:-1])
        at_start = head  # the round's objective is evaluated at its start, after the protocol's messages
        if r < config.rounds and rank == 0:
            shared_P = _serve(config, method, chosen, model, body_values, applied)
            round_s.append(time.perf_counter() - start)
            round_cpu_s.append(time.thread_time() - cpu)
        elif r < config.rounds and me in chosen:
            if method == "pflego":
                sent_P, head, _at = toy.pflego_client(model, head, data, config.local_steps, config.head_lr,
                                                      config.lr * clients / len(chosen))
            else:
                sent_P = toy.fedavg_client(model, data, config.local_steps, config.lr)
            dist.send(sent_P, 0)
            up[me] += _size(sent_P)
            client_cpu_s.append(time.thread_time() - cpu)
        loss_I = torch.zeros(clients, dtype=torch.float64)
        if rank:
            with torch.no_grad():
                loss_I[me] = float(toy.loss(model[:-1], model[-1:], *data) if method == "fedavg"
                                   else toy.loss(model, at_start, *data))
        dist.all_reduce(loss_I)
        losses.append(float(loss_I.mean()))
    dist.all_reduce(up)
    clients_cpu: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(clients_cpu, client_cpu_s)
    selected = [sum(c in toy.selected(config, r) for r in range(config.rounds)) for c in range(clients)]
    return {"losses": losses, "applied": applied, "download_bytes": down, "upload_bytes": up.tolist(),
            "eval_bytes": eval_bytes, "rounds": config.rounds, "selected_rounds": selected, "round_s": round_s,
            "round_cpu_s": round_cpu_s, "client_cpu_s": clients_cpu[1:]}


def _serve(config: FederatedRunConfig, method: str, chosen: list[int], model: toy.Layers, body_values: int,
           applied: list[list[float]]) -> torch.Tensor:
    """The server's round: each selected client's body gradient (PFLEGO) or weights (FedAvg) received, the step
    taken (PFLEGO's applied gradient appended to ``applied``); the new shared values."""
    got = [torch.empty(body_values if method == "pflego" else toy.flat(model).numel()) for _ in chosen]
    for c, buffer_P in zip(chosen, got):
        dist.recv(buffer_P, c + 1)
    if method == "fedavg":
        return toy.flat(toy.fedavg_server(model, got))
    new_body, step_P = toy.pflego_server(model, got, config.clients, config.lr)
    applied.append(step_P.tolist())
    return toy.flat(new_body)


def train(config: FederatedRunConfig) -> dict[str, Any]:
    """Every method of ``config`` on the ranks (rank 0's view), or in one process (``config.reference``)."""
    out: dict[str, Any] = {"config": {k: v for k, v in asdict(config).items() if k != "out"}}
    for method in config.methods:
        if config.reference:
            trace = toy.federate(config, method)
            out[method] = {"losses": trace.losses, "applied": trace.applied, "full": trace.full}
        else:
            out[method] = _method(config, method)
    return out


def main(argv: list[str] | None = None) -> int:
    config = read_config(FederatedRunConfig, argv, prog="plait.workloads.federated.worker", description=__doc__)
    return run_job(config.out, bool(config.reference), lambda: train(config))


if __name__ == "__main__":
    raise SystemExit(main())
