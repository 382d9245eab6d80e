"""One traced pass at one batch size (:func:`record_pass`): every ATen operator's FLOPs and bytes by the unit that
runs it, what autograd keeps for the backward, each unit's output bytes and the order gradients complete."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from plait.errors import ConfigError
from plait.workloads.traced.attention import SplitPaths
from plait.workloads.traced.gpu_kernels import gpu_kernels_mode
from plait.workloads.traced.model import Shape
from plait.workloads.traced.winograd import winograd_shape

FREE = frozenset({"empty", "empty_like", "empty_strided", "_unsafe_view", "lift_fresh", "detach", "alias",
                  "new_empty", "new_empty_strided"})
"""Operators that move no data (allocations without a fill, aliases that the schema does not mark as views)."""


class Record:
    """What one pass at one batch size saw: kernels (unit, name, flops, bytes, backward, TP split, Winograd shape),
    saved tensors (unit, whether a parameter, bytes), output bytes per unit and the gradient order."""

    def __init__(self, count: int) -> None:
        self.kernels: list[tuple[int, str, float, float, bool, int, bool]] = []  # ..., backward, split, Winograd
        self.saved: list[tuple[int, bool, float, bool]] = []  # ..., split over a TP group
        self.outputs = [0.0] * count
        self.grad_order: list[str] = []
        self.pair_outputs: dict[str, float] = {}


def record_pass(model: Any, units: list[str], shape: Shape, input_dtype: str, dtype: str, batch: int,
                splits: SplitPaths | None = None) -> Record:
    """One forward and backward pass of ``model`` on a meta input of ``batch`` examples of ``shape``, recorded unit
    by unit (``units``: the module paths the model is cut into; ``splits``: the paths a TP group would split)."""
    import torch
    from torch.utils.module_tracker import ModuleTracker

    state = _Pass(model, units, splits or SplitPaths(rows=frozenset(), columns=frozenset(), cores=frozenset()),
                  ModuleTracker())
    hooks = state.hooks(model, units)
    example = torch.zeros((batch, *shape), dtype=getattr(torch, input_dtype), device="meta")
    if example.is_floating_point():
        example = example.to(getattr(torch, dtype))
    try:
        with state.tracker, gpu_kernels_mode()(), _recorder_mode()(state):
            with torch.autograd.graph.saved_tensors_hooks(state.pack, lambda t: t):
                out = first_tensor(model(example))
                if out is None:
                    raise ConfigError("the model's output holds no tensor to train on")
                loss = out.float().mean()
            loss.backward()
    finally:
        for hook in hooks:
            hook.remove()
        for p in model.parameters():
            p.grad = None  # the next pass starts without gradients to accumulate into
    return state.record


def first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (tuple, list)) else ()
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


class _Pass:
    """The bookkeeping of :func:`record_pass`: which unit runs now, and the storages autograd has kept."""

    def __init__(self, model: Any, units: list[str], splits: SplitPaths, tracker: Any) -> None:
        self.count = len(units) + 2  # pre, the units, post
        self.record = Record(self.count)
        root = type(model).__name__
        self.unit_of = {f"{root}.{path}": i + 1 for i, path in enumerate(units)}
        self.seen = {"fwd": False, "bwd": False}
        self.tracker = tracker
        self.params = {id(p) for p in model.parameters()}
        self.splits = splits
        self.kept: list[Any] = []
        self.kept_ids: set[int] = set()

    def current(self) -> int:
        """The unit running now: the innermost unit on the module stack; outside every unit, ``pre`` before the
        first unit of the forward (after the last of the backward) and ``post`` otherwise."""
        inside = [self.unit_of[p] for p in self.tracker.parents if p in self.unit_of]
        phase = "bwd" if self.tracker.is_bw else "fwd"
        if inside:
            self.seen[phase] = True
            return inside[0]
        late = self.seen[phase]
        return (0 if not late else self.count - 1) if phase == "fwd" else (self.count - 1 if not late else 0)

    def operator(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        """Records one ATen operator's FLOPs (PyTorch's own formulas) and bytes (operands and results; views and
        :data:`FREE` operators move none)."""
        from torch.utils.flop_counter import flop_registry

        packet = func._overloadpacket
        flops = float(flop_registry[packet](*args, **kwargs, out_val=out)) if packet in flop_registry else 0.0
        free = func.is_view or packet.__name__ in FREE
        moved = 0.0 if free else _nbytes((args, kwargs)) + _nbytes(out)
        if flops or moved:
            self.record.kernels.append((self.current(), packet.__name__, flops, moved, self.tracker.is_bw,
                                        self.splits.kernel(set(self.tracker.parents)),
                                        winograd_shape(packet.__name__, args)))

    def pack(self, tensor: Any) -> Any:
        """Saved-tensor hook: counts each storage autograd keeps once (a view's base)."""
        base = tensor._base if tensor._base is not None else tensor
        if id(base) not in self.kept_ids:
            self.kept_ids.add(id(base))
            self.kept.append(base)
            self.record.saved.append((self.current(), id(base) in self.params, float(base.numel() * base.element_size()),
                                      self.splits.saved(set(self.tracker.parents))))
        return tensor

    def hooks(self, model: Any, units: list[str]) -> list[Any]:
        """Hooks that record each unit's output bytes, what ``pre`` hands the first unit, each TP pair's output
        (the row-parallel Linear's) and the order gradients complete."""
        record, modules = self.record, dict(model.named_modules())
        hooks = []
        for i, path in enumerate(units):
            hooks.append(modules[path].register_forward_hook(
                lambda m, a, out, i=i: record.outputs.__setitem__(i + 1, _nbytes(out))))
        if units:
            hooks.append(modules[units[0]].register_forward_pre_hook(
                lambda m, a: record.outputs.__setitem__(0, _nbytes(a))))
        for path in (path.partition(".")[2] for path in self.splits.rows):  # as the model names them
            hooks.append(modules[path].register_forward_hook(
                lambda m, a, out, path=path: record.pair_outputs.__setitem__(path, _nbytes(out))))
        names = {id(p): n for n, p in model.named_parameters()}
        for p in model.parameters():
            hooks.append(p.register_post_accumulate_grad_hook(lambda p: record.grad_order.append(names[id(p)])))
        return hooks


def _nbytes(values: Any) -> float:
    import torch

    flat, _ = torch.utils._pytree.tree_flatten(values)
    return float(sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor)))


@functools.cache
def _recorder_mode() -> Any:
    """The ``TorchDispatchMode`` class that hands every operator to a :class:`_Pass`; defined on first use, so that
    importing plait does not import torch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self, state: _Pass) -> None:
            super().__init__()
            self.state = state

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            self.state.operator(func, args, kwargs, out)
            return out

    return Recorder
