"""Which parameter server holds which gradient elements under ``param_server``.

A replica's gradient tensors are laid end to end in the order :func:`placement` gives and cut into one contiguous
piece per server, so that the runtime (:mod:`plait.run.servers`) and the cost model (:mod:`plait.cost.servers`)
read the same loads:

- ``balanced``: the tensors in their own order, cut into ``S`` pieces of ``ceil`` or ``floor`` of ``E / S`` elements
  (BytePS partitions every tensor and spreads the partitions over the servers so that each carries the same bytes,
  Jiang et al., OSDI 2020, Sec. 4.2);
- ``layerwise``: whole tensors, largest first, each onto the server with the least so far (ties: the lower index) —
  the longest-processing-time rule (Graham 1969) for the per-layer placement of parameter-server systems that keep a
  tensor on one server (TensorFlow's greedy load balancing; 001-17). Its most loaded server carries at least
  ``E / S`` and at least the largest tensor.
"""

from __future__ import annotations

import math

from plait.workload.tensors import Shape

PLACEMENTS = ("balanced", "layerwise")


def placement(shapes: list[Shape], servers: int, how: str) -> tuple[list[int], list[int]]:
    """(tensor order, elements per server): the gradient tensors in the order they are laid end to end, and the
    elements of that flat buffer each server holds, in server order (they sum to every element)."""
    sizes = [math.prod(s) for s in shapes]
    total = sum(sizes)
    if how == "balanced":
        base, extra = divmod(total, servers)
        return list(range(len(shapes))), [base + (1 if j < extra else 0) for j in range(servers)]
    loads, held = [0] * servers, [[] for _ in range(servers)]  # type: list[int], list[list[int]]
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        least = min(range(servers), key=lambda j: (loads[j], j))
        loads[least] += sizes[index]
        held[least].append(index)
    return [i for tensors in held for i in tensors], loads
