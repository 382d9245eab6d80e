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
user gives ``--input-shape`` (and ``--input-dtype``). A factory whose model runs each softmax and the dropout after it
as one kernel (a fusing compiler's) says so with ``fused_softmax_dropout``
(:mod:`plait.workloads.traced.softmax_dropout`). The model's output (the first tensor of a tensor, tuple,
list or mapping, as Hugging Face's ``ModelOutput``) is reduced to a mean as the loss.
"""

from __future__ import annotations

import functools
import importlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from plait.errors import ConfigError, require_extra
from plait.plan.plan import FULL_PRECISIONS
from plait.workloads.traced.attention import SplitPaths, find_splits
from plait.workloads.traced.model import Kernel, LinearPair, Shape, TracedWorkload, Unit
from plait.workloads.traced.recorder import Record, record_pass
from plait.workloads.traced.softmax_dropout import fuse_softmax_dropout

DTYPES = ("float32", "bfloat16", "float16", "int64")
CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
COVERAGE_SHARE = 0.9
"""Unit classes whose instances hold at least this share of the best candidate's parameters count as covering the
model (:func:`choose_units`)."""
BATCHES = (2, 3)
"""The two batch sizes traced (a batch of one lets some reshapes stay views that copy at every larger batch)."""


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
        one, two = (record_pass(model, units, shape, input_dtype, dtype, batch, splits) for batch in BATCHES)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError) as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"--model {name!r}: its forward or backward failed on the meta device with input shape "
                          f"{shape} ({type(error).__name__}: {first}); code that reads tensor values cannot be "
                          "traced") from None
    work = _combine(name, shape, input_dtype, dtype, unit_class, units, one, two, owners, named)
    if getattr(factory, "fused_softmax_dropout", False):  # the factory's model runs them as one kernel
        work = fuse_softmax_dropout(work)
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
             one: Record, two: Record, owners: dict[str, int], named: list[tuple[str, Shape]]) -> TracedWorkload:
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
