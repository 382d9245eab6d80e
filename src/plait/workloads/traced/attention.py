"""Megatron-style self-attention of a traced module's repeated units: where tensor parallelism splits heads.

Megatron splits self-attention by heads (Shoeybi et al. 2019, "Megatron-LM", Sec. 3, Fig. 3b): the query, key and
value projections column-parallel (each rank computes ``heads / tp`` of them), the attention core on those heads
alone, the output projection row-parallel, joined by one all-reduce of its output forward and one of its input's
gradient backward, as a Linear pair (:mod:`plait.workloads.traced.pairs`).

What is recognised, read from ``torch.fx.symbolic_trace`` of each repeated unit: an ``nn.Linear`` (the output
projection) whose input is computed, through the *region* of operators below and nothing else, from exactly three
``nn.Linear`` of one and the same input (q, k, v; none used outside the region) and from side tensors that do not
depend on that input (rotary tables, a causal mask):

- the region holds the core: a ``scaled_dot_product_attention`` call, or a ``matmul`` and a ``softmax`` over the
  last dimension (the scores' keys);
- its other operators are views, transposes, slices, casts, ``repeat_interleave`` (grouped key/value heads,
  Ainslie et al. 2023), elementwise arithmetic (rotary embeddings, Su et al. 2021; the scale), ``masked_fill`` and
  dropout (:data:`REGION_OPS`, and elementwise modules such as ``nn.Dropout``), and no tensor of it is used outside
  it;
- each view or reshape has a ``-1`` (a rank holds ``heads / tp`` heads, so the head count must be inferred, as in
  ``view(b, s, -1, head_dim)``), and q, k and v are first viewed with the same last dimension (the head size).

These operators are taken to act on each head alone, as attention written this way does (a side tensor with a
heads dimension, an operator that mixes heads, or a later view that fixes the head count is not caught here: the
split run then fails on its shapes).
A fused q/k/v projection (one Linear, its output split in three) or a view with a fixed head count is refused.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from plait.workloads.traced.pairs import ELEMENTWISE_MODULES, Found, TracedUnit, find_pairs, trace_units

REGION_OPS = frozenset({"view", "reshape", "transpose", "permute", "contiguous", "repeat_interleave", "expand",
                        "unsqueeze", "flatten", "unflatten", "stack", "cat", "getitem", "to", "float", "half",
                        "bfloat16", "type_as", "mul", "add", "sub", "truediv", "div", "neg", "matmul", "softmax",
                        "dropout", "masked_fill", "scaled_dot_product_attention"})
"""Operators (functions, tensor methods, ``operator`` functions, by name) allowed between q, k, v and the output
projection (module docstring)."""
SPLITS = frozenset({"split", "chunk", "unbind", "tensor_split"})
"""Operators that cut one tensor in parts: followed back (to name a fused q/k/v projection), never allowed."""
METADATA = frozenset({"shape", "dtype", "device", "ndim", "size", "dim"})
"""Attributes and methods that read a tensor's metadata, not its values."""

FoundAttention = tuple[int, str, str, int, int, tuple[str, ...], tuple[int, ...], str]
"""(unit index, q path, output projection path, q's output features, split parameters, (k path, v path),
head counts of (q, k, v), the module running the core ("" where it holds other parameters))"""


def find_splits(model: Any, units: list[str]) -> tuple[list[Found], list[FoundAttention], str, str]:
    """The Linear pairs (:func:`plait.workloads.traced.pairs.find_pairs`) and attentions (:func:`find_attention`)
    of ``units``; why there are neither, in words (empty where there are some); why an attention is not split (the
    first refusal; empty where none)."""
    traced = trace_units(model, units)
    pairs, why = find_pairs(traced)
    attention, refused = find_attention(traced)
    note = refused[0] if refused else ""
    why = "" if pairs or attention else why + (f"; attention not split: {note}" if note else "")
    return pairs, attention, why, note


@dataclass(frozen=True, kw_only=True)
class SplitPaths:
    """Module paths (as ``ModuleTracker`` names them: under the root's class name) tensor parallelism splits, and
    what an operator or a saved tensor running under a set of them (``parents``) splits into ``tp``."""

    rows: frozenset[str]
    """Row-parallel Linears (a pair's second, an attention's output projection)."""
    columns: frozenset[str]
    """Column-parallel Linears (a pair's first and gates, an attention's q, k, v)."""
    cores: frozenset[str]
    """Modules running an attention's core (and no parameters but its Linears)."""

    @staticmethod
    def of(root: str, pairs: list[Found], attention: list[FoundAttention]) -> SplitPaths:
        found = [*pairs, *(a[:6] for a in attention)]
        return SplitPaths(rows=frozenset(f"{root}.{f[2]}" for f in found),
                          columns=frozenset(f"{root}.{p}" for f in found for p in (f[1], *f[5])),
                          cores=frozenset(f"{root}.{a[7]}" for a in attention if a[7]))

    def kernel(self, parents: set[str]) -> int:
        """0: an operator run whole on every TP rank; 1: in a split module (its GEMMs split); 2: in an attention's
        core module outside its Linears (on the rank's heads: all of it split)."""
        if parents & self.cores and not parents & (self.rows | self.columns):
            return 2
        return 1 if parents & (self.rows | self.columns | self.cores) else 0

    def saved(self, parents: set[str]) -> bool:
        """A tensor saved here is split: saved by a row-parallel Linear (its input: the split hidden features) or in
        an attention's core module outside its column-parallel Linears (which save their whole input)."""
        return bool(parents & self.rows) or bool(parents & self.cores and not parents & self.columns)


def runtime_splits(model: Any, units: list[str]) -> tuple[list[Found], str]:
    """What the runtime splits (:func:`find_splits`), each as a pair: the first and gates column-parallel, the second
    row-parallel (an attention's q, its k and v, its output projection); why nothing, where nothing."""
    pairs, attention, why, _ = find_splits(model, units)
    return [*pairs, *(a[:6] for a in attention)], why


def find_attention(traced: list[TracedUnit]) -> tuple[list[FoundAttention], list[str]]:
    """Every self-attention of the traced units that splits by heads (module docstring), and a one-line reason for
    each output projection fed by an attention core that does not (a unit that does not trace has none)."""
    from torch import nn

    found: list[FoundAttention] = []
    refused: list[str] = []
    for index, path, unit, graph in traced:
        if graph is None:
            continue
        modules = dict(unit.named_modules())
        for node in graph.nodes:
            if node.op != "call_module" or not isinstance(modules.get(node.target), nn.Linear) or not node.args:
                continue
            result = _attention(node, modules, nn)
            if isinstance(result, str):
                refused.append(f"{path}.{node.target}: {result}")
            elif result is not None:
                found.append(_found(index, path, node, result, unit, modules))
    return found, refused


def _found(index: int, path: str, out: Any, result: tuple[list[Any], int, Any], unit: Any,
           modules: dict[str, Any]) -> FoundAttention:
    leaves, head_dim, core = result
    q, k, v = leaves
    columns = [modules[n.target] for n in leaves]
    split = modules[out.target].weight.numel() + sum(
        c.weight.numel() + (c.bias.numel() if c.bias is not None else 0) for c in columns)
    holder = next(reversed(core.meta.get("nn_module_stack", {}) or {"": None}), "")
    linears = {n.target for n in (*leaves, out)}
    owned = {f"{holder}.{name}" if holder else name for name, p in unit.get_submodule(holder).named_parameters()}
    alone = holder and all(name.rpartition(".")[0] in linears for name in owned)
    return (index, f"{path}.{q.target}", f"{path}.{out.target}", columns[0].out_features, split,
            (f"{path}.{k.target}", f"{path}.{v.target}"), tuple(c.out_features // head_dim for c in columns),
            f"{path}.{holder}" if alone else "")


def _name(node: Any) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _metadata(node: Any) -> bool:
    """``node`` computes from tensors' metadata only (a shape, a dtype, an index into them)."""
    if not hasattr(node, "op"):
        return True
    if node.op == "call_function" and node.target is getattr:
        return len(node.args) > 1 and node.args[1] in METADATA
    if node.op == "call_method" and node.target in METADATA:
        return True
    if node.op == "call_function" and node.target in (operator.getitem, operator.mul, operator.floordiv,
                                                        operator.add, operator.sub):
        return all(_metadata(a) for a in node.all_input_nodes) and bool(node.all_input_nodes)
    return False


def _depends(node: Any, source: Any) -> bool:
    """``node``'s values are computed from ``source``'s (metadata edges aside)."""
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current is source:
            return True
        if current in seen or _metadata(current):
            continue
        seen.add(current)
        stack.extend(current.all_input_nodes)
    return False


def _attention(out: Any, modules: dict[str, Any], nn: Any) -> tuple[list[Any], int, Any] | str | None:
    """(q, k, v nodes, head size, the core node) where ``out`` is an attention's output projection (module
    docstring); a reason where an attention core feeds it in a way that does not split; None where no core does."""
    region: list[Any] = []
    leaves: list[Any] = []
    stack, seen = [out.args[0]], set()
    while stack:
        node = stack.pop()
        if node in seen or _metadata(node):
            continue
        seen.add(node)
        if node.op == "call_module" and isinstance(modules.get(node.target), nn.Linear):
            leaves.append(node)
        elif _allowed(node, modules) or _name(node) in SPLITS:
            region.append(node)
            stack.extend(node.all_input_nodes)
        elif node.op in ("placeholder", "get_attr"):
            continue
        else:
            region.append(node)  # judged below, where a core makes it matter
    core = next((n for n in region if _name(n) == "scaled_dot_product_attention"), None)
    if core is None and any(_name(n) == "matmul" for n in region):
        core = next((n for n in region if _name(n) == "softmax"), None)
    if core is None:
        return None
    if len(leaves) != 3:
        return (f"its attention core reads {len(leaves)} Linear outputs, not three (q, k, v)"
                + ("; a fused q/k/v projection is not split" if len(leaves) == 1 else ""))
    source = leaves[0].args[0] if leaves[0].args else None
    if any(not n.args or n.args[0] is not source for n in leaves):
        return "its q, k and v Linears do not read the same input (cross-attention is not split)"
    data = [n for n in region if _depends(n, source)]
    for node in data:
        if not _allowed(node, modules):
            return f"{node.name} ({_name(node) or node.op}) between q, k, v and the output is not a per-head operator"
        if _name(node) == "softmax" and _dim(node) not in (-1, 3):
            return f"{node.name} takes the softmax over dimension {_dim(node)}, not the keys' (-1)"
        if _name(node) in ("view", "reshape") and -1 not in _ints(node):
            return f"{node.name} views a fixed shape {_ints(node)}: write -1 for the head count (a rank holds heads/tp)"
    inside = {*data, out}
    for node in (*data, *leaves):
        if any(u not in inside and not _metadata(u) for u in node.users):
            return f"{node.name} is also used outside the attention (its split heads would be needed whole)"
    sizes = {_head_dim(n) for n in leaves}
    if len(sizes) != 1 or None in sizes:
        return "q, k and v are not first viewed into heads of one size (view(..., -1, head_dim))"
    head_dim = sizes.pop()
    assert head_dim is not None
    if any(modules[n.target].out_features % head_dim for n in leaves):
        return f"the head size {head_dim} does not divide the q, k, v Linears' outputs"
    return _roles(core, data, leaves), head_dim, core


def _roles(core: Any, data: list[Any], leaves: list[Any]) -> list[Any]:
    """q, k, v: traced back from the SDPA call's first three arguments, or from the scores' product (q, k) and the
    product of the softmax with v; in the order found where neither reads them apart."""
    if _name(core) == "scaled_dot_product_attention":
        args = list(core.args[:3])
    else:
        products = [n for n in data if _name(n) == "matmul" and len(n.args) == 2]
        scores = next((n for n in products if _depends(core, n)), None)
        mixed = next((n for n in products if _depends(n, core)), None)
        if scores is None or mixed is None:
            return leaves
        args = [*scores.args, mixed.args[1] if _depends(mixed.args[0], core) else mixed.args[0]]
    ordered: list[Any] = []
    for arg in args:
        ordered.extend(leaf for leaf in leaves if _depends(arg, leaf) and leaf not in ordered)
    return ordered if len(ordered) == 3 else leaves


def _allowed(node: Any, modules: dict[str, Any]) -> bool:
    """``node`` is one of the region's operators (module docstring)."""
    if node.op == "call_module":
        return type(modules.get(node.target)).__name__ in ELEMENTWISE_MODULES
    return node.op in ("call_function", "call_method") and _name(node) in REGION_OPS


def _ints(node: Any) -> list[int]:
    flat: list[Any] = []
    for a in node.args[1:]:
        flat.extend(a if isinstance(a, (tuple, list)) else [a])
    return [a for a in flat if isinstance(a, int)]


def _dim(node: Any) -> Any:
    return node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)


def _head_dim(leaf: Any) -> int | None:
    """The last size of the first view of ``leaf``'s output (its head size), or None."""
    for user in leaf.users:
        if _name(user) in ("view", "reshape"):
            ints = _ints(user)
            return ints[-1] if ints and ints[-1] > 0 else None
    return None
