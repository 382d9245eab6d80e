"""Poseidon's sufficient factor broadcasting on ``torch.distributed``'s point-to-point sends
(``param_server:...,hybrid=true``; :mod:`plait.plan.factors`).

Every ``nn.Linear`` of the model records, in each backward pass, its input ``X`` (from a forward hook) and the
gradient ``dY`` of its output (from a hook on the output tensor, which autograd calls with that gradient); rows of
every micro-batch of a step are kept. After the backward pass, the weights :func:`plait.plan.factors.factored`
picks for this step's ``K`` rows are exchanged as factors: each replica sends its ``X`` and ``dY`` of all of them,
fp32, in one message to every peer, and every replica rebuilds each gradient as ``dY_all^T X_all / P`` over all
replicas' rows in rank order — the same GEMM on the same operands everywhere, so the replicas stay identical. The
sum is the one the all-reduce takes (``sum_p dY_p^T X_p``), up to the order of the additions. Rows are kept by
reference: with activation recomputation the recorded inputs outlive the forward pass (Poseidon did not
recompute). The hooks of a recomputed forward pass register on tensors that autograd never reaches, so nothing is
recorded twice.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from plait.plan.factors import factored
from plait.run.sends import PUSH, Sends, global_rank, group_rank
from plait.run.sites import Reducer


class SufficientFactors:
    """The factors of ``modules``' linear layers, recorded every backward pass and exchanged by :meth:`exchange`."""

    def __init__(self, modules: tuple[nn.Module, ...], replicas: Reducer, servers: int) -> None:
        self.replicas, self.servers = replicas, servers
        self.layers: dict[int, tuple[str, nn.Linear]] = {}  # the weight's id -> (its name, its module)
        self.rows: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        tables = {id(m.weight) for part in modules for m in part.modules() if isinstance(m, nn.Embedding)}
        for part in modules:
            for name, module in part.named_modules():
                if isinstance(module, nn.Linear) and id(module.weight) not in tables:  # a tied head: a table too
                    self.layers[id(module.weight)] = (f"{name}.weight", module)
                    self.rows[id(module.weight)] = []
                    module.register_forward_hook(self._record(id(module.weight)))

    def _record(self, key: int):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if not (torch.is_grad_enabled() and output.requires_grad):
                return
            x = inputs[0].detach()
            output.register_hook(lambda grad: self.rows[key].append(
                (x.reshape(-1, x.shape[-1]), grad.detach().reshape(-1, grad.shape[-1]))))
        return hook

    def tokens(self) -> int:
        """Rows recorded this step (every linear layer sees each of the replica's tokens once)."""
        counts = {sum(x.shape[0] for x, _ in rows) for rows in self.rows.values() if rows}
        if len(counts) > 1:
            raise RuntimeError(f"linear layers saw different numbers of rows this step: {sorted(counts)}")
        return counts.pop() if counts else 0

    @torch.no_grad()
    def exchange(self, params: list[nn.Parameter]) -> set[int]:
        """Replace the gradient of each factored weight among ``params`` by the replicas' mean, rebuilt from every
        replica's factors; the ids of those weights (the servers take the rest)."""
        n, tokens = self.replicas.size, self.tokens()
        named = [(self.layers[id(p)][0] if id(p) in self.layers else "", tuple(p.shape)) for p in params]
        chosen = [p for p, f in zip(params, factored(named, tokens, n, min(self.servers, n))) if f]
        if chosen:
            mine = torch.cat([torch.cat([x.to(torch.float32), dy.to(torch.float32)], dim=1).reshape(-1)
                              for p in chosen for x, dy in [self._joined(p)]])
            everyone = self._broadcast(mine)
            for p, pieces in zip(chosen, self._split(everyone, chosen, tokens)):
                x_all = torch.cat([x for x, _ in pieces])
                dy_all = torch.cat([dy for _, dy in pieces])
                p.grad.copy_((dy_all.t() @ x_all).div_(n).to(p.grad.dtype))  # type: ignore[union-attr]
        for rows in self.rows.values():
            rows.clear()
        return {id(p) for p in chosen}

    def _joined(self, weight: nn.Parameter) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.rows[id(weight)]
        return torch.cat([x for x, _ in rows]), torch.cat([dy for _, dy in rows])

    def _broadcast(self, mine: torch.Tensor) -> list[torch.Tensor]:
        """Every replica's ``mine``, in rank order: one send to each peer, one receive from each."""
        replicas, me, n = self.replicas, group_rank(self.replicas), self.replicas.size
        sent = [Sends.isend(mine, global_rank(replicas, dst), replicas.group, PUSH) for dst in range(n) if dst != me]
        everyone = []
        for src in range(n):
            if src == me:
                everyone.append(mine)
                continue
            incoming = torch.empty_like(mine)
            dist.recv(incoming, global_rank(replicas, src), replicas.group, PUSH)
            everyone.append(incoming)
        for work in sent:
            work.wait()
        return everyone

    @staticmethod
    def _split(everyone: list[torch.Tensor], chosen: list[nn.Parameter],
               tokens: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Per chosen weight, each replica's (X, dY) out of the flat messages."""
        sizes = [tokens * (p.shape[1] + p.shape[0]) for p in chosen]
        per_weight: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in chosen]
        for message in everyone:
            for i, (p, piece) in enumerate(zip(chosen, message.split(sizes))):
                joined = piece.view(tokens, p.shape[1] + p.shape[0])
                per_weight[i].append((joined[:, : p.shape[1]], joined[:, p.shape[1]:]))
        return per_weight
