"""Layer-wise weight offload emulated on CPU ranks (ChunkFlow, arXiv 2605.11335, 001-02; the cost side is
:mod:`plait.workloads.dit.offload`): every block's weight matrices live in a host copy, the block itself holds
none between uses, and two device slots take turns: while layer ``l`` computes in one, layer ``l + 1``'s weights
are copied into the other on a helper thread (the prefetch), and layer 0's again after the last layer for the next
step. Biases, norms and the layers outside the blocks stay resident (``DitSpec.params`` counts the blocks' matrices).

On this machine host and "device" are the same memory: the copies are what a GPU would receive over PCIe, counted
byte for byte, but nothing crosses a link, so only the bytes and the two-slot residency are checked here, not the
stream's time.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import nn


class LayerOffload:
    """Hooks on ``blocks`` that load each block's matrices before it runs and release them after; ``runs``: the
    forward passes to come (no prefetch after the last)."""

    def __init__(self, blocks: nn.ModuleList, runs: int) -> None:
        self.runs_left, self.slot_of, self.turn = runs * len(blocks), dict[int, int](), 0
        self.params = [[p for p in block.parameters() if p.dim() >= 2] for block in blocks]
        self.host = [[p.detach().clone() for p in layer] for layer in self.params]
        self.slots = [[torch.empty_like(p) for p in self.params[0]] for _ in range(2)]
        self.streamed_bytes, self.loaded, self.peak_loaded = 0, set[int](), 0
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending: dict[int, Future[None]] = {}
        for layer in self.params:
            for p in layer:
                p.data = torch.empty(0)  # the block holds no weights until loaded
        for index, block in enumerate(blocks):
            block.register_forward_pre_hook(lambda _m, _a, i=index: self._before(i))
            block.register_forward_hook(lambda _m, _a, _o, i=index: self._after(i))

    def _schedule(self, layer: int) -> None:
        """The other slot than the last one scheduled: the layer computing keeps its own."""
        self.slot_of[layer], self.turn = self.turn, 1 - self.turn

    def _copy(self, layer: int) -> None:
        for slot, host in zip(self.slots[self.slot_of[layer]], self.host[layer]):
            slot.copy_(host)
            self.streamed_bytes += host.numel() * host.element_size()

    def _before(self, layer: int) -> None:
        work = self.pending.pop(layer, None)
        if work is None:  # nothing prefetched it (the first layer of the first step)
            self._schedule(layer)
            self._copy(layer)
        else:
            work.result()
        for p, slot in zip(self.params[layer], self.slots[self.slot_of[layer]]):
            p.data = slot
        self.loaded.add(layer)
        self.runs_left -= 1
        following = (layer + 1) % len(self.params)
        if self.runs_left > 0 and following != layer:
            self._schedule(following)
            self.pending[following] = self.pool.submit(self._copy, following)
        self.peak_loaded = max(self.peak_loaded, len(self.loaded) + len(self.pending))

    def _after(self, layer: int) -> Any:
        for p in self.params[layer]:
            p.data = torch.empty(0)
        self.loaded.discard(layer)
        return None

    def close(self) -> None:
        self.pool.shutdown()
