"""Megatron-style Linear pairs of a traced module's repeated units: where tensor parallelism applies.

A pair is an ``nn.Linear`` whose output feeds a second ``nn.Linear`` through elementwise operators only (an
activation, dropout): the first split by columns (its output features), the second by rows (its input features),
so the elementwise operators run on each rank's slice and one all-reduce of the second's output per forward (and
one of the first's input gradient per backward) joins them (Shoeybi et al. 2019, "Megatron-LM", Sec. 3, Fig. 3a).
A gated MLP (SwiGLU, ``w2(silu(w1(x)) * w3(x))``: Shazeer 2020) is a pair with a *gate*: a third Linear of the
same input whose output multiplies the chain elementwise, split by columns like the first (as Megatron-Core's
``linear_fc1`` holds both halves).

The data flow is read with ``torch.fx.symbolic_trace`` of each repeated unit, not from the module hierarchy and
the order modules run: registration or call order cannot tell ``fc2(gelu(fc1(x)))`` from ``fc2(norm(x + fc1(x)))``
(a residual or a normalisation between the two breaks the split), the graph's edges can. A unit whose forward
does not trace symbolically (control flow on values) has no pairs, and the reason says so.
"""

from __future__ import annotations

from typing import Any

ELEMENTWISE_MODULES = frozenset({"ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Dropout", "Identity", "Mish", "ReLU6",
                                 "LeakyReLU", "ELU", "Hardswish", "Hardtanh"})
"""One-input, one-output modules that act on each element alone (so on each rank's slice of the hidden features)."""
ELEMENTWISE_FUNCTIONS = frozenset({"relu", "gelu", "silu", "tanh", "sigmoid", "dropout", "mish", "relu6",
                                   "leaky_relu", "elu", "hardswish"})
"""The same as ``torch``/``torch.nn.functional`` functions or tensor methods, by name."""


Found = tuple[int, str, str, int, int, tuple[str, ...]]
"""(unit index (1-based, as the trace numbers units), first path, second path, hidden, split parameters, gates)"""


TracedUnit = tuple[int, str, Any, Any]
"""(unit index (1-based), path, the unit module, its ``torch.fx`` graph, or ``None`` where its forward does not
trace symbolically)"""


def trace_units(model: Any, units: list[str]) -> list[TracedUnit]:
    """Each of ``units`` of ``model`` traced once with ``torch.fx.symbolic_trace`` (read by :func:`find_pairs` and
    :func:`plait.workloads.traced.attention.find_attention`)."""
    from torch import fx

    traced: list[TracedUnit] = []
    for index, path in enumerate(units, start=1):
        unit = model.get_submodule(path)
        try:
            graph = fx.symbolic_trace(unit).graph
        except Exception:  # noqa: BLE001 - any Python in a forward may refuse symbolic tracing
            graph = None
        traced.append((index, path, unit, graph))
    return traced


def find_pairs(traced: list[TracedUnit]) -> tuple[list[Found], str]:
    """Every pair in the traced units (module docstring; :data:`Found`), and why there are none where there are
    none."""
    from torch import nn

    found: list[Found] = []
    untraced = [path for _, path, _, graph in traced if graph is None]
    for index, path, unit, graph in traced:
        if graph is None:
            continue
        modules = dict(unit.named_modules())
        used: set[str] = set()
        for node in graph.nodes:
            if not _is_linear(node, modules, nn) or node.target in used:
                continue
            followed = _follow(node, modules, nn)
            if followed is None:
                continue
            second, gates = followed
            a, b = modules[node.target], modules[second.target]
            columns = [a, *(modules[g.target] for g in gates)]
            if any(c.out_features != b.in_features for c in columns):
                continue
            used.update((node.target, second.target, *(g.target for g in gates)))
            split = b.weight.numel() + sum(c.weight.numel() + (c.bias.numel() if c.bias is not None else 0)
                                           for c in columns)
            found.append((index, f"{path}.{node.target}", f"{path}.{second.target}", a.out_features, split,
                          tuple(f"{path}.{g.target}" for g in gates)))
    if found:
        return found, ""
    if not traced:
        return [], "the model has no repeated units to look for Linear pairs in"
    if untraced and len(untraced) == len(traced):
        return [], f"its units ({untraced[0]}, ...) do not trace with torch.fx, so no Linear pair can be read"
    return [], "no Linear in its units feeds a second Linear through elementwise operators only"


def _is_linear(node: Any, modules: dict[str, Any], nn: Any) -> bool:
    return node.op == "call_module" and isinstance(modules.get(node.target), nn.Linear)


def _follow(node: Any, modules: dict[str, Any], nn: Any) -> tuple[Any, list[Any]] | None:
    """The Linear that ``node``'s output reaches through a chain of single-use elementwise operators (and the
    gates it is multiplied by on the way), or None."""
    current, gates = node, []
    while len(current.users) == 1:
        (user,) = current.users
        if _is_linear(user, modules, nn):
            return (user, gates) if user.args and user.args[0] is current else None
        gate = _gate(user, current, node, modules, nn)
        if gate is not None:
            gates.append(gate)
        elif not _elementwise(user, current, modules):
            return None
        current = user
    return None


def _gate(node: Any, source: Any, first: Any, modules: dict[str, Any], nn: Any) -> Any:
    """The Linear ``node`` multiplies ``source`` by, where it reads the first Linear's input and feeds only this
    product (a SwiGLU gate: module docstring); else None."""
    import operator

    import torch

    if node.op != "call_function" or node.target not in (operator.mul, torch.mul) or len(node.args) != 2:
        return None
    other = node.args[1] if node.args[0] is source else node.args[0] if node.args[1] is source else None
    if other is None or not hasattr(other, "op") or not _is_linear(other, modules, nn) or len(other.users) != 1:
        return None
    return other if other.args and first.args and other.args[0] is first.args[0] else None


def _elementwise(node: Any, source: Any, modules: dict[str, Any]) -> bool:
    """``node`` applies an elementwise operator to ``source`` alone."""
    if not node.args or node.args[0] is not source:
        return False
    if any(hasattr(a, "op") for a in (*node.args[1:], *node.kwargs.values())):
        return False  # a second tensor operand (a residual, a gate from elsewhere)
    if node.op == "call_module":
        return type(modules.get(node.target)).__name__ in ELEMENTWISE_MODULES
    if node.op in ("call_function", "call_method"):
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        return name in ELEMENTWISE_FUNCTIONS
    return False
