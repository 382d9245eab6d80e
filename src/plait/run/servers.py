"""Gradient sums through parameter servers and an emulated aggregating switch, on ``torch.distributed``'s
point-to-point sends. Both reduce each rank's local gradients after the backward pass, before
clipping (:func:`plait.run.replica_grads.reduce_gradients`), where DDP would; the optimizer then steps on the mean
on every replica. What each rank sends is :func:`plait.cost.sync.payload_bytes`, to the byte.

- :class:`ParamServer` (``param_server:servers=S,host=ranks``): the replicas of group rank ``0..S-1`` each host
  one server. Every replica pushes each server its piece of the gradient (:func:`plait.plan.servers.placement`),
  a server sums the pieces in rank order and sends the mean back (BytePS's summation service: Jiang et al., OSDI
  2020, Sec. 4.1; servers that also ran the optimizer would send parameters of the same size). The same sum as
  the all-reduce's, so training equals plain data parallelism up to the order of the additions.
- :class:`SwitchAggregation` (``switch_aggregation:bits=B``) emulates SwitchML's protocol (Sapio et al., NSDI
  2021, Sec. 3.3-4.4) with group rank 0 as the switch. The gradient is cut into slots of
  :data:`plait.cost.servers.SLOT_ELEMENTS` elements; for each slot the ranks agree on the largest binary
  exponent ``e`` (one byte each way: the switch's max register), scale by ``2^s``,
  ``s = B - 2 - e - ceil(log2 n)``, round to ``B``-bit integers, and the switch adds the integers (its registers
  are integer adders) and returns the sum, which each rank scales back and divides by ``n``. Each rounding errs by
  at most ``2^-(s+1)``, so the mean errs by at most ``2^(e + ceil(log2 n) - B + 1)`` per element
  (:func:`rounding_bound`); the spare bit keeps ``n`` sums of rounded values inside ``B`` bits. What a real switch
  changes: its ports aggregate at line rate while here rank 0's link carries every rank's traffic, and its pool of
  slots streams the gradient in windows (the cost model charges the window, :mod:`plait.cost.servers`); here the
  whole gradient is one message.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from plait import sync as methods
from plait.cost.servers import SLOT_ELEMENTS
from plait.plan.servers import placement
from plait.run.local import local_tensor
from plait.run.replica_grads import shard_gradients_like_parameters
from plait.run.sends import PULL, PUSH, Sends, global_rank, group_rank
from plait.run.sites import Reducer
from plait.run.wrapped import Wrapped

CODE_TYPES = {16: torch.int16, 32: torch.int32}


class _GradientSum(Wrapped):
    """The optimizer ``inner`` after :meth:`reduce`, which replaces each local gradient by the replicas' mean
    computed by :meth:`mean` on one flat fp32 buffer."""

    def __init__(self, inner: torch.optim.Optimizer, sync: methods.SyncMethod, replicas: Reducer) -> None:
        super().__init__(inner)
        self.sync, self.replicas = sync, replicas

    def order(self, grads: list[torch.Tensor]) -> list[int]:
        """The order the gradients are laid end to end in."""
        return list(range(len(grads)))

    def others(self, params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        """The parameters whose gradients go through :meth:`mean` (the rest already hold the mean)."""
        return params

    def mean(self, flat: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def reduce(self) -> None:
        """Every local gradient becomes the replicas' mean."""
        if self.replicas.size <= 1:
            return
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        shard_gradients_like_parameters(params)
        params = self.others(params)
        grads = [local_tensor(p.grad) for p in params]  # type: ignore[arg-type]
        order = self.order(grads)
        flat = torch.cat([grads[i].reshape(-1).to(torch.float32) for i in order])
        mean = self.mean(flat)
        for i, piece in zip(order, mean.split([grads[i].numel() for i in order])):
            grads[i].copy_(piece.view_as(grads[i]))


class ParamServer(_GradientSum):
    """Sharded parameter servers on the first ``servers`` replicas (module docstring); with ``hybrid=true``, the
    linear layers of ``modules`` that :func:`plait.plan.factors.factored` picks exchanged as sufficient factors
    first (:class:`plait.run.factors.SufficientFactors`)."""

    def __init__(self, inner: torch.optim.Optimizer, sync: methods.ParamServer, replicas: Reducer,
                 modules: tuple[torch.nn.Module, ...] = ()) -> None:
        super().__init__(inner, sync, replicas)
        self.factors = None
        if sync.hybrid:
            from plait.run.factors import SufficientFactors

            self.factors = SufficientFactors(modules, replicas, sync.servers)

    def others(self, params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        if self.factors is None:
            return params
        done = self.factors.exchange(params)
        return [p for p in params if id(p) not in done]

    def _layout(self, grads: list[torch.Tensor]) -> tuple[list[int], list[int]]:
        servers = min(self.sync.servers, self.replicas.size)
        return placement([tuple(g.shape) for g in grads], servers, self.sync.placement)

    def order(self, grads: list[torch.Tensor]) -> list[int]:
        order, self.sizes = self._layout(grads)
        return order

    def mean(self, flat: torch.Tensor) -> torch.Tensor:
        replicas, me, n = self.replicas, group_rank(self.replicas), self.replicas.size
        pieces = list(flat.split(self.sizes))
        pushed = [Sends.isend(pieces[j], global_rank(replicas, j), replicas.group, PUSH)
                  for j in range(len(pieces)) if j != me]
        if me < len(pieces):  # this replica hosts a server: sum its piece over the replicas, in rank order
            total, incoming = torch.zeros_like(pieces[me]), torch.empty_like(pieces[me])
            for src in range(n):
                if src == me:
                    total += pieces[me]
                    continue
                dist.recv(incoming, global_rank(replicas, src), replicas.group, PUSH)
                total += incoming
            pieces[me] = total.div_(n)
            pulled = [Sends.isend(pieces[me], global_rank(replicas, dst), replicas.group, PULL)
                      for dst in range(n) if dst != me]
        else:
            pulled = []
        for j in range(len(pieces)):
            if j != me:
                pieces[j] = torch.empty_like(pieces[j])
                dist.recv(pieces[j], global_rank(replicas, j), replicas.group, PULL)
        for work in (*pushed, *pulled):
            work.wait()
        return torch.cat(pieces)


def rounding_bound(exponent: int, replicas: int, bits: int) -> float:
    """Largest error of the switch's mean of one element whose slot's shared exponent is ``exponent``."""
    return 2.0 ** (exponent + math.ceil(math.log2(replicas)) - bits + 1)


def slot_exponents(flat: torch.Tensor) -> torch.Tensor:
    """Per slot of :data:`SLOT_ELEMENTS`, the binary exponent ``e`` with every ``|x| < 2^e`` (``torch.frexp``),
    as int8 (clamped to +-127: fp32 overflows beyond)."""
    slots = math.ceil(flat.numel() / SLOT_ELEMENTS)
    padded = torch.zeros(slots * SLOT_ELEMENTS, dtype=flat.dtype)
    padded[: flat.numel()] = flat
    largest = padded.view(slots, SLOT_ELEMENTS).abs().amax(dim=1)
    return torch.frexp(largest).exponent.clamp(-127, 127).to(torch.int8)


class SwitchAggregation(_GradientSum):
    """SwitchML's fixed-point aggregation, with group rank 0 emulating the switch (module docstring)."""

    def _through_switch(self, mine: torch.Tensor, combine) -> torch.Tensor:  # type: ignore[no-untyped-def]
        """Every rank sends ``mine`` to the switch (rank 0), which combines all of them in rank order and sends
        the result back."""
        replicas, me, n = self.replicas, group_rank(self.replicas), self.replicas.size
        if me != 0:
            sent = Sends.isend(mine, global_rank(replicas, 0), replicas.group, PUSH)
            result = torch.empty_like(mine)
            dist.recv(result, global_rank(replicas, 0), replicas.group, PULL)
            sent.wait()
            return result
        gathered = [mine]
        for src in range(1, n):
            incoming = torch.empty_like(mine)
            dist.recv(incoming, global_rank(replicas, src), replicas.group, PUSH)
            gathered.append(incoming)
        result = combine(gathered)
        for work in [Sends.isend(result, global_rank(replicas, dst), replicas.group, PULL)
                     for dst in range(1, n)]:
            work.wait()
        return result

    def mean(self, flat: torch.Tensor) -> torch.Tensor:
        n, bits = self.replicas.size, self.sync.bits
        exponents = self._through_switch(slot_exponents(flat), lambda each: torch.stack(each).amax(dim=0))
        codes, shift = encode(flat, exponents, n, bits)
        summed = self._through_switch(
            codes, lambda each: torch.stack([c.to(torch.int64) for c in each]).sum(dim=0).to(CODE_TYPES[bits]))
        return decode(summed, shift, n)


def encode(flat: torch.Tensor, exponents: torch.Tensor, replicas: int, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(``bits``-bit integer codes, per-element shift ``s``) of ``flat`` under the slots' shared ``exponents``:
    ``round(x 2^s)`` with ``s = bits - 2 - e - ceil(log2 replicas)`` (module docstring)."""
    shift = (bits - 2 - math.ceil(math.log2(replicas)) - exponents.to(torch.int32))
    shift = shift.repeat_interleave(SLOT_ELEMENTS)[: flat.numel()].to(torch.float64)
    return torch.round(torch.ldexp(flat.to(torch.float64), shift)).to(CODE_TYPES[bits]), shift


def decode(summed: torch.Tensor, shift: torch.Tensor, replicas: int) -> torch.Tensor:
    """The mean, in fp32, from the switch's integer sum."""
    return (torch.ldexp(summed.to(torch.float64), -shift) / replicas).to(torch.float32)
