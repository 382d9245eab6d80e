"""Activation swapping in the runtime: the tensors autograd saves for the backward go to host memory during the
forward and come back for the backward (``swap_activations``; cost model: :mod:`plait.cost.swap`).

Built on PyTorch's saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``), as
``torch.autograd.graph.save_on_cpu`` is: pack runs when an op saves a tensor, unpack when the backward needs it.
Unlike ``save_on_cpu`` (one blocking or pinned copy per save, on the current stream, brought back when unpacked):

- parameters, views of them and the model's buffers stay where they are (LMS swaps activations, not weights;
  Le et al. 2018, arXiv 1811.12174);
- a storage saved by several ops (a norm's output feeding q, k and v) moves once: saves are matched by storage
  within one transformer block (or the stretch between blocks), whose saved storages are held until the block's
  forward ends, so an address cannot be reused within it; each save unpacks as its view of the storage;
- on CUDA the device-to-host copy goes to pinned memory on a side stream (``non_blocking``), the source kept
  alive for the copy by ``record_stream``; when a block's backward starts, the storages of the block before it
  are copied back on the side stream (prefetch one layer ahead), and unpack waits for that copy;
- on a CPU device the tensors are already in host memory: pack and unpack hand them back as they are (nothing
  moves physically) and only the bytes are counted. ``copy=True`` runs the copying path on a CPU, into separate
  host buffers, so that it is tested without a GPU.

:attr:`ActivationSwap.packed_bytes` counts the bytes of the distinct storages packed in a step: what crosses the
host link each way. With ``layers`` (``swap_layers``) only the first blocks' saves are packed, as Transformer
Engine's CPU offload takes the first ``cpu_offloading_num_layers`` layer groups. The CUDA path has not run on a GPU yet.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from plait.run.model import Block

NOTHING_MOVES = ("swap_activations: the device is the CPU, whose tensors are already in host memory: the hooks "
                 "count the saved bytes and move nothing")
OUTSIDE = -1
"""The block index of saves outside every transformer block (embedding, final norm, head, loss)."""


@dataclass
class _Stored:
    """One saved storage in host memory, with the copies in flight (events on CUDA, ``None`` on a CPU)."""

    host: torch.Tensor
    """The storage's bytes (uint8) in host memory."""
    device: torch.device
    copied_out: Any = None
    back: torch.Tensor | None = None
    """The bytes back on the device, once prefetched or first unpacked."""
    copied_back: Any = None


@dataclass
class ActivationSwap:
    """Saved-tensor hooks over one rank's model parts; enter it around a step's forward and backward passes."""

    parts: list[nn.Module]
    device: str
    copy: bool | None = None
    """Whether the hooks copy storages out and back (default: on CUDA) or hand tensors back as they are."""
    layers: int = -1
    """Swap the saves of the first ``layers`` transformer blocks only (``swap_layers``; the others, and every save
    outside the blocks, stay on the device, uncounted); -1: every save."""
    packed_bytes: int = 0
    """Bytes of the distinct storages packed since :meth:`reset` (parameters and buffers excluded)."""
    layer_bytes: int = 0
    """Of those, the bytes packed inside transformer blocks."""
    _block: int = OUTSIDE
    _seen: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    """Storages packed in the current block, by address: (their record or ``None``, the storage, held)."""
    _groups: dict[int, list[weakref.ref[_Stored]]] = field(default_factory=dict)
    """Each block's records, weakly: a record lives as long as autograd holds a save of it."""
    _kept: set[int] = field(default_factory=set)
    _hooks: Any = None
    _stream: Any = None

    def __post_init__(self) -> None:
        if self.copy is None:
            self.copy = self.device == "cuda"
        self._kept = {t.untyped_storage().data_ptr() for part in self.parts for t in part.buffers()}
        blocks = [module for part in self.parts for module in part.modules() if isinstance(module, Block)]
        for index, block in enumerate(blocks):
            block.register_forward_pre_hook(lambda module, args, i=index: self._enter(i))
            block.register_forward_hook(lambda module, args, out: self._enter(OUTSIDE))
            if self.copy:
                block.register_full_backward_pre_hook(lambda module, grad, i=index: self._prefetch(i - 1))
        if self.copy and self.device == "cuda":
            self._stream = torch.cuda.Stream()

    @property
    def moves(self) -> bool:
        """Whether tensors physically move to host memory (a CUDA device)."""
        return self.device == "cuda"

    def reset(self) -> None:
        """Start counting a new step."""
        self.packed_bytes = self.layer_bytes = 0
        self._groups.clear()
        self._seen.clear()

    def __enter__(self) -> ActivationSwap:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        self._seen.clear()

    def _enter(self, block: int) -> None:
        self._block = block
        self._seen.clear()  # the storages of the block that ended may be freed now

    def _weight(self, tensor: torch.Tensor) -> bool:
        base = tensor._base if tensor._base is not None else tensor
        return (isinstance(base, nn.Parameter) or (base.is_leaf and base.requires_grad)
                or tensor.untyped_storage().data_ptr() in self._kept)

    def _pack(self, tensor: torch.Tensor) -> Any:
        if self._weight(tensor):
            return tensor  # weights and buffers are not activations: they stay on the device
        if self.layers >= 0 and not 0 <= self._block < self.layers:
            return tensor  # a block past the first ``layers``, or outside the blocks: kept where it is
        storage = tensor.untyped_storage()
        seen = self._seen.get(storage.data_ptr())
        if seen is None:
            self.packed_bytes += storage.nbytes()
            self.layer_bytes += storage.nbytes() if self._block != OUTSIDE else 0
            seen = (self._copy_out(tensor) if self.copy else None, storage)
            self._seen[storage.data_ptr()] = seen  # holds the storage until the block ends
            if seen[0] is not None:
                self._groups.setdefault(self._block, []).append(weakref.ref(seen[0]))
        record = seen[0]
        if record is None:
            return tensor
        return record, tensor.dtype, tensor.size(), tensor.stride(), tensor.storage_offset()

    def _copy_out(self, tensor: torch.Tensor) -> _Stored:
        source = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
        if tensor.device.type != "cuda":
            return _Stored(host=source.clone(), device=tensor.device)
        host = torch.empty(source.shape, dtype=torch.uint8, pin_memory=True)
        self._stream.wait_stream(torch.cuda.current_stream())  # the tensor is written before it is copied
        with torch.cuda.stream(self._stream):
            host.copy_(source, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        source.record_stream(self._stream)  # its memory is not reused before the copy has read it
        return _Stored(host=host, device=tensor.device, copied_out=done)

    def _copy_back(self, stored: _Stored) -> None:
        if stored.back is not None:
            return
        if stored.copied_out is None:  # a CPU: the copying path without streams
            stored.back = stored.host.clone()
            return
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(stored.copied_out)
            stored.back = stored.host.to(stored.device, non_blocking=True)
            stored.copied_back = torch.cuda.Event()
            stored.copied_back.record()

    def _prefetch(self, block: int) -> None:
        """Copy block ``block``'s storages back to the device ahead of its backward."""
        for ref in self._groups.get(block, []):
            stored = ref()
            if stored is not None:
                self._copy_back(stored)

    def _unpack(self, packed: Any) -> torch.Tensor:
        if not isinstance(packed, tuple):
            return packed  # type: ignore[no-any-return]
        stored, dtype, size, stride, offset = packed
        self._copy_back(stored)  # not prefetched: outside the blocks, or the first block of the backward
        if stored.copied_back is not None:
            torch.cuda.current_stream().wait_event(stored.copied_back)
            stored.back.record_stream(torch.cuda.current_stream())
        return stored.back.view(dtype).as_strided(size, stride, offset)
