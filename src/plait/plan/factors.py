"""Which gradients Poseidon's hybrid communication sends as sufficient factors (``param_server:...,hybrid=true``;
001-H).

A linear layer ``y = x W^T`` applied to ``K`` rows (a replica's tokens in one step, every micro-batch) has the
gradient ``dW = dY^T X``, a sum of ``K`` outer products: a replica can send its factors ``X`` (``K x N``) and ``dY``
(``K x M``) instead of the ``M x N`` gradient, and every peer rebuilds the sum from all replicas' factors
(sufficient factor broadcasting, SFB: Xie et al., "Distributed Machine Learning via Sufficient Factor
Broadcasting", arXiv 1511.08486, 2015; Zhang et al., "Poseidon", USENIX ATC 2017, Sec. 3.2). With ``P`` replicas
and ``S`` servers on them, the elements one replica moves (sends plus receives) per step for one such tensor
(Poseidon, Table 1, the colocated server-and-worker column, and Algorithm 1):

- parameter servers: ``2 M N (P + S - 2) / S`` — a ``1/S`` shard of the tensor on each server; as a worker it
  pushes and pulls the ``S - 1`` shards held elsewhere, ``2 M N (S - 1) / S``, and as a server it takes ``P - 1``
  pieces of its own shard in and sends as many sums out, ``2 M N (P - 1) / S``;
- SFB: ``2 K (P - 1) (M + N)`` — its factors to each of the ``P - 1`` peers, and theirs in.

Poseidon's ``BestScheme`` sends a fully connected layer by SFB when its cost is at most the servers'; every other
tensor — embedding tables (whose gradient is a scatter of rows, not ``dY^T X`` of a dense input), biases, norms —
goes to the servers. Here a tensor is a linear layer's weight when it is two-dimensional and not an embedding
table (the weights of ``nn.Linear`` modules in plait's model, :mod:`plait.workload.tensors`).
"""

from __future__ import annotations

from plait.workload.tensors import Shape

EMBEDDINGS = ("tok_embeddings.", "pos_embeddings.")
"""Two-dimensional parameters that are tables looked up by index, not linear layers."""


def linear_weight(name: str, shape: Shape) -> bool:
    """Whether parameter ``name`` of ``shape`` is a linear layer's ``(out, in)`` weight."""
    return len(shape) == 2 and name.endswith(".weight") and not name.startswith(EMBEDDINGS)


def factored(named: list[tuple[str, Shape]], tokens: int, replicas: int, servers: int) -> list[bool]:
    """Per parameter of ``named``, whether hybrid communication sends it as sufficient factors: a linear weight
    ``M x N`` with ``K (P - 1) (M + N) <= M N (P + S - 2) / S`` (module docstring), ``K = tokens`` rows per replica
    and step, ``P = replicas``, ``S = servers``."""
    if replicas <= 1 or tokens <= 0:
        return [False] * len(named)
    return [linear_weight(name, shape)
            and tokens * (replicas - 1) * (shape[0] + shape[1]) * servers
            <= shape[0] * shape[1] * (replicas + servers - 2)
            for name, shape in named]


def factor_elements(named: list[tuple[str, Shape]], flags: list[bool], tokens: int) -> int:
    """Elements of one replica's sufficient factors per step: ``K (M + N)`` for each factored tensor."""
    return sum(tokens * (shape[0] + shape[1]) for (_, shape), f in zip(named, flags) if f)


def rebuild_flops(named: list[tuple[str, Shape]], flags: list[bool], tokens: int, replicas: int) -> float:
    """FLOPs of rebuilding the factored gradients from every replica's factors: one ``M x (P K) x N`` GEMM each."""
    return sum(2.0 * replicas * tokens * shape[0] * shape[1] for (_, shape), f in zip(named, flags) if f)
