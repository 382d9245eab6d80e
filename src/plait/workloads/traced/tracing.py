"""Measure any ``torch.nn.Module`` as a plait workload (:mod:`plait.workloads.traced.model` says what is kept).

``plait estimate --model MODULE:FACTORY`` imports ``MODULE``, calls ``FACTORY()`` under ``torch.device("meta")``
(parameters without storage: seconds, no memory, no GPU) and runs one forward and backward pass of a meta input
of one example and of two, under a ``TorchDispatchMode`` that sees every ATen operator: FLOPs from PyTorch's own
formulas (``torch.utils.flop_counter.flop_registry``, what ``FlopCounterMode`` counts: matrix products,
convolutions, attention), bytes from the shapes and dtypes of operands and results (views move none), and the
module running it from ``torch.utils.module_tracker.ModuleTracker`` (forward and backward). Saved-tensor hooks
(``torch.autograd.graph.saved_tensors_hooks``) see what autograd keeps for the backward; post-accumulate-grad
hooks, the order gradients complete. Quantities at two batch sizes (:data:`BATCHES`) give the fixed and
per-example parts.

A factory may carry ``example_shape`` (one example's input shape) and ``input_dtype`` attributes; otherwise the
user gives ``--input-shape`` (and ``--input-dtype``). The model's output (the first tensor of a tensor, tuple,
list or mapping, as Hugging Face's ``ModelOutput``) is reduced to a mean as the loss.
"""

from __future__ import annotations

import functools
import importlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from plait.errors import ConfigError, require_extra
from plait.plan.plan import FULL_PRECISIONS
from plait.workloads.traced.attention import SplitPaths, find_splits
from plait.workloads.traced.model import Kernel, LinearPair, Shape, TracedWorkload, Unit
from plait.workloads.traced.winograd import winograd_shape

DTYPES = ("float32", "bfloat16", "float16", "int64")
CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
COVERAGE_SHARE = 0.9
"""Unit classes whose instances hold at least this share of the best candidate's parameters count as covering the
model (:func:`choose_units`)."""
BATCHES = (2, 3)
"""The two batch sizes traced (a batch of one lets some reshapes stay views that copy at every larger batch)."""
FREE = frozenset({"empty", "empty_like", "empty_strided", "_unsafe_view", "lift_fresh", "detach", "alias",
                  "new_empty", "new_empty_strided"})
"""Operators that move no data (allocations without a fill, aliases that the schema does not mark as views)."""


def load_factory(name: str) -> Callable[[], Any]:
    """The callable ``module:attr`` names; one-line errors when it does not import or is not callable."""
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - an import fails in any way (torchvision beside another torch)
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"--model {name!r}: module {module_name!r} does not import "
                          f"({type(error).__name__}: {first})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"--model {name!r}: {module_name} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


def storage_dtype(precision: str | None) -> str:
    """The dtype to trace parameters and activations in for a plan of ``precision``: float32 for fp32 and tf32
    (full-precision storage), bfloat16 otherwise."""
    return "float32" if precision in FULL_PRECISIONS else "bfloat16"


@functools.lru_cache(maxsize=16)  # plait validate classic's rows need 10 (2 models x shapes x 2 dtypes); 8 traced 12
def trace(name: str, example_shape: Shape | None = None, input_dtype: str | None = None,
          dtype: str = "bfloat16") -> TracedWorkload:
    """The workload of the module that factory ``name`` builds (module docstring); kept per arguments in this
    process (a workload is immutable). The shipped factories build Hugging Face transformers' models."""
    require_extra("traced" if name.startswith("plait.workload.zoo:") else "run", f"--model {name}")
    return trace_factory(load_factory(name), name, example_shape, input_dtype, dtype)


def trace_factory(factory: Callable[[], Any], name: str, example_shape: Shape | None = None,
                  input_dtype: str | None = None, dtype: str = "bfloat16") -> TracedWorkload:
    """:func:`trace` of a factory given as a callable (``name``: how to call it in messages)."""
    import torch

    shape = tuple(example_shape or getattr(factory, "example_shape", ()) or ())
    if not shape:
        raise ConfigError(f"--model {name!r}: give --input-shape (one example's input shape, e.g. 3,224,224)")
    input_dtype = input_dtype or getattr(factory, "input_dtype", "float32")
    for label, value in (("--input-dtype", input_dtype), ("dtype", dtype)):
        if value not in DTYPES:
            raise ConfigError(f"{label}={value!r} must be one of {', '.join(DTYPES)}")
    with torch.device("meta"):
        model = factory()
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"--model {name!r}: the factory returned {type(model).__name__}, not a torch.nn.Module")
    model = model.to(getattr(torch, dtype)).train()
    units, unit_class = choose_units(model)
    owners = _owners(model, units, len(units) + 2)
    named = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    pairs, attention, no_pairs, attention_note = find_splits(model, units)
    splits = SplitPaths.of(type(model).__name__, pairs, attention)
    try:
        one, two = (_run(model, units, shape, input_dtype, dtype, batch, splits) for batch in BATCHES)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError) as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"--model {name!r}: its forward or backward failed on the meta device with input shape "
                          f"{shape} ({type(error).__name__}: {first}); code that reads tensor values cannot be "
                          "traced") from None
    work = _combine(name, shape, input_dtype, dtype, unit_class, units, one, two, owners, named)
    (b1, b2) = BATCHES
    heads = {a[2]: (a[6], a[7]) for a in attention}
    linear_pairs = tuple(LinearPair(unit=i, first=a, second=b, hidden=h, split_params=n, gates=g,
                                    output_bytes_per_example=(two.pair_outputs[b] - one.pair_outputs[b]) / (b2 - b1),
                                    heads=heads.get(b, ((), ""))[0], core=heads.get(b, ((), ""))[1])
                         for i, a, b, h, n, g in [*pairs, *(a[:6] for a in attention)])
    return replace(work, pairs=linear_pairs, no_pairs_reason=no_pairs, attention_note=attention_note)


def choose_units(model: Any) -> tuple[list[str], str]:
    """The module paths the model is cut into, and their class: of the classes (not containers, not leaves) with
    two or more instances that hold parameters and do not nest, those whose instances cover at least
    :data:`COVERAGE_SHARE` of the best coverage of parameters, the one with the fewest instances (the coarsest
    repeated block: a transformer's layers, a ResNet's stages or bottlenecks); with none, the root's children
    (containers opened)."""
    counted = {id(p): p.numel() for p in model.parameters()}
    by_class: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for path, module in model.named_modules():
        kind = type(module).__name__
        if not path or kind in CONTAINERS or not any(True for _ in module.children()):
            continue
        held = sum(counted.get(id(p), 0) for p in module.parameters())
        if held:
            by_class[kind].append((path, held))
    candidates = {k: v for k, v in by_class.items() if len(v) >= 2 and not _nested([p for p, _ in v])}
    if candidates:
        coverage = {k: sum(h for _, h in v) for k, v in candidates.items()}
        best = max(coverage.values())
        kind = min((k for k in candidates if coverage[k] >= COVERAGE_SHARE * best),
                   key=lambda k: (len(candidates[k]), -coverage[k]))
        return [p for p, _ in candidates[kind]], kind
    return _children(model, ""), "children"


def _nested(paths: list[str]) -> bool:
    return any(a != b and b.startswith(a + ".") for a in paths for b in paths)


def _children(module: Any, prefix: str) -> list[str]:
    out = []
    for child_name, child in module.named_children():
        path = f"{prefix}{child_name}"
        if type(child).__name__ in CONTAINERS:
            out += _children(child, path + ".")
        elif any(True for _ in child.parameters()):
            out.append(path)
    return out


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


class _Record:
    """What one pass at one batch size saw: kernels (unit, name, flops, bytes, backward), saved tensors (unit,
    whether a parameter, bytes), output bytes per unit and the gradient order."""

    def __init__(self, count: int) -> None:
        self.kernels: list[tuple[int, str, float, float, bool, int]] = []  # ..., backward, split (split_kernel)
        self.saved: list[tuple[int, bool, float, bool]] = []  # ..., split over a TP group
        self.outputs = [0.0] * count
        self.grad_order: list[str] = []
        self.pair_outputs: dict[str, float] = {}


def _run(model: Any, units: list[str], shape: Shape, input_dtype: str, dtype: str, batch: int,
         splits: SplitPaths | None = None) -> _Record:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry
    from torch.utils.module_tracker import ModuleTracker

    count = len(units) + 2  # pre, the units, post
    record, root = _Record(count), type(model).__name__
    unit_of = {f"{root}.{path}": i + 1 for i, path in enumerate(units)}
    modules = dict(model.named_modules())
    seen = {"fwd": False, "bwd": False}
    tracker = ModuleTracker()
    params = {id(p) for p in model.parameters()}
    splits = splits or SplitPaths(rows=frozenset(), columns=frozenset(), cores=frozenset())
    rows = [path.partition(".")[2] for path in splits.rows]  # as the model names them

    def current() -> int:
        inside = [unit_of[p] for p in tracker.parents if p in unit_of]
        phase = "bwd" if tracker.is_bw else "fwd"
        if inside:
            seen[phase] = True
            return inside[0]
        late = seen[phase]
        return (0 if not late else count - 1) if phase == "fwd" else (count - 1 if not late else 0)

    def nbytes(values: Any) -> float:
        flat, _ = torch.utils._pytree.tree_flatten(values)
        return float(sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor)))

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out)) if packet in flop_registry else 0.0
            free = func.is_view or packet.__name__ in FREE
            moved = 0.0 if free else nbytes((args, kwargs)) + nbytes(out)
            if flops or moved:
                record.kernels.append((current(), packet.__name__, flops, moved, tracker.is_bw,
                                       splits.kernel(set(tracker.parents)), winograd_shape(packet.__name__, args)))
            return out

    class GpuKernels(torch.overrides.TorchFunctionMode):
        """Three functions as a GPU runs them, where the meta device runs PyTorch's reference decomposition:
        ``scaled_dot_product_attention`` is FlashAttention-2 on CUDA (``_scaled_dot_product_flash_attention``,
        which saves its output and the log-sum-exp per query; the math path saves the whole score matrix);
        ``dropout`` in training is one fused kernel (``native_dropout``, which writes the output and a boolean
        mask, its backward ``native_dropout_backward`` reading the gradient and the mask: ATen's ``dropout`` takes
        it for CUDA tensors, ``is_fused_kernel_acceptable`` in aten/src/ATen/native/Dropout.cpp, where other
        devices draw a Bernoulli tensor, scale it and multiply); and ``rms_norm`` is one fused kernel
        (``_fused_rms_norm``, whose backward ``_fused_rms_norm_backward`` reads the input and the fp32 reciprocal
        RMS per row; the decomposition saves fp32 copies). Attention with a mask or
        grouped heads (``enable_gqa``) keeps PyTorch's own choice."""

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is torch.nn.functional.scaled_dot_product_attention:
                flash = _flash_call(args, kwargs)
                if flash is not None:
                    return flash
            if func is torch.nn.functional.dropout:
                fused = _fused_dropout(args, kwargs)
                if fused is not None:
                    return fused
            if func is torch.nn.functional.rms_norm:
                names = ("input", "normalized_shape", "weight", "eps")
                given = {**dict(zip(names, args)), **kwargs}
                return _FusedRMSNorm.apply(given["input"], given.get("weight"), len(given["normalized_shape"]))
            return func(*args, **kwargs)

    _FusedRMSNorm = _fused_rms_norm()
    kept: list[Any] = []
    kept_ids: set[int] = set()

    def pack(tensor: Any) -> Any:
        base = tensor._base if tensor._base is not None else tensor
        if id(base) not in kept_ids:
            kept_ids.add(id(base))
            kept.append(base)
            record.saved.append((current(), id(base) in params, float(base.numel() * base.element_size()),
                                 splits.saved(set(tracker.parents))))
        return tensor

    hooks = []
    for i, path in enumerate(units):
        hooks.append(modules[path].register_forward_hook(
            lambda m, a, out, i=i: record.outputs.__setitem__(i + 1, nbytes(out))))
    if units:  # what pre hands the first unit
        hooks.append(modules[units[0]].register_forward_pre_hook(
            lambda m, a: record.outputs.__setitem__(0, nbytes(a))))
    for path in rows:  # a pair's output: the second (row-parallel) Linear's
        hooks.append(modules[path].register_forward_hook(
            lambda m, a, out, path=path: record.pair_outputs.__setitem__(path, nbytes(out))))
    names = {id(p): n for n, p in model.named_parameters()}
    for p in model.parameters():
        hooks.append(p.register_post_accumulate_grad_hook(lambda p: record.grad_order.append(names[id(p)])))
    example = torch.zeros((batch, *shape), dtype=getattr(torch, input_dtype), device="meta")
    if example.is_floating_point():
        example = example.to(getattr(torch, dtype))
    try:
        with tracker, GpuKernels(), Recorder():
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
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
    return record


def _fused_rms_norm() -> Any:
    import torch

    class FusedRMSNorm(torch.autograd.Function):
        """What the fused RMSNorm kernel saves and moves (:func:`_run`'s ``GpuKernels``): forward reads the input
        and the weight and writes the output (one multiply stands for it on the meta device); backward reads the
        output gradient, the input and the weight and writes the input and weight gradients."""

        @staticmethod
        def forward(ctx, x, weight, dims):  # type: ignore[no-untyped-def]
            rstd = x.new_empty((*x.shape[: x.dim() - dims], *([1] * dims)), dtype=torch.float32)
            ctx.save_for_backward(x, weight, rstd)
            ctx.dims = dims
            return torch.mul(x, weight) if weight is not None else x.clone()

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            x, weight, _ = ctx.saved_tensors
            dx = torch.mul(grad, weight) if weight is not None else grad.clone()
            dw = torch.mul(grad, x).sum(dim=tuple(range(x.dim() - ctx.dims))) if weight is not None else None
            return dx, dw, None

    return FusedRMSNorm


def _fused_dropout(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of ``dropout`` as CUDA runs it in training (``native_dropout``), or ``None`` where ATen runs no
    kernel or another one (not training, ``p`` of 0 or 1, in place)."""
    import torch

    names = ("input", "p", "training", "inplace")
    given = {"p": 0.5, "training": True, "inplace": False, **dict(zip(names, args)), **kwargs}
    if not given["training"] or given["inplace"] or not 0.0 < float(given["p"]) < 1.0:
        return None
    return torch.native_dropout(given["input"], float(given["p"]), True)[0]


def _flash_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """FlashAttention's output for an unmasked ``scaled_dot_product_attention`` call of equal head counts, or
    ``None`` for calls it does not cover."""
    import torch

    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    given = {**dict(zip(names, args)), **kwargs}
    q, k, v = given["query"], given["key"], given["value"]
    if given.get("attn_mask") is not None or given.get("enable_gqa") or q.shape[-3] != k.shape[-3]:
        return None
    return torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, float(given.get("dropout_p", 0.0)), bool(given.get("is_causal", False)),
        scale=given.get("scale"))[0]


def _owners(model: Any, units: list[str], count: int) -> dict[str, int]:
    """The unit of each parameter: a unit's own by its path; others ``pre`` or ``post`` by where their module sits
    among the units in the module order (registration order: the order ``named_modules`` lists)."""
    order = [path for path, _ in model.named_modules()]
    first = order.index(units[0]) if units else len(order)
    out = {}
    for name, _ in model.named_parameters():
        owner = name.rpartition(".")[0]
        inside = [i + 1 for i, u in enumerate(units) if owner == u or owner.startswith(u + ".")]
        if inside:
            out[name] = inside[0]
        else:
            out[name] = 0 if order.index(owner) < first else count - 1
    return out


def _combine(name: str, shape: Shape, input_dtype: str, dtype: str, unit_class: str, units: list[str],
             one: _Record, two: _Record, owners: dict[str, int], named: list[tuple[str, Shape]]) -> TracedWorkload:
    """Fixed and per-example parts from the passes at the two batch sizes (operator by operator): a quantity
    ``q`` at batch ``b`` is ``fixed + per b``; ``owners``: each parameter's unit (:func:`_owners`)."""
    if [k[:2] + k[4:] for k in one.kernels] != [k[:2] + k[4:] for k in two.kernels]:
        raise ConfigError(f"--model {name!r}: the operators run differ between batch sizes {BATCHES[0]} and "
                          f"{BATCHES[1]} (control flow that depends on the batch is not traced)")
    (b1, b2), count = BATCHES, len(units) + 2

    def split(q1: float, q2: float) -> tuple[float, float]:
        per = (q2 - q1) / (b2 - b1)
        return max(0.0, q1 - per * b1), per

    kernels: list[list[Kernel]] = [[] for _ in range(count)]
    for (unit, op, f1, m1, backward, in_split, wino), (_, _, f2, m2, *_) in zip(one.kernels, two.kernels):
        fixed, per = split(m1, m2)
        kernels[unit].append(Kernel(op, split(f1, f2)[1], fixed, per, backward, in_split > 0, in_split == 2, wino))
    saved = [[0.0, 0.0] for _ in range(count)]  # at b1, at b2
    split_saved = [[0.0, 0.0] for _ in range(count)]  # the part split over a TP group
    for column, record in enumerate((one, two)):
        for unit, is_param, size, is_split in record.saved:
            if not is_param:
                saved[unit][column] += size
                split_saved[unit][column] += size if is_split else 0.0
    params: list[list[tuple[str, Shape]]] = [[] for _ in range(count)]
    for pname, pshape in named:
        params[owners[pname]].append((pname, pshape))
    labels = ["pre", *units, "post"]
    built = tuple(Unit(labels[i], tuple(kernels[i]), tuple(params[i]), *split(*saved[i]),
                       split(one.outputs[i], two.outputs[i])[1], split(*split_saved[i])[1]) for i in range(count))
    return TracedWorkload(name=name, example_shape=shape, input_dtype=input_dtype, dtype=dtype, units=built,
                          grad_order=tuple(one.grad_order), unit_class=unit_class)
