"""A workload measured from a real ``torch.nn.Module`` instead of a transformer's closed forms.

:mod:`plait.workloads.traced.tracing` builds the module on the meta device (no weights, no GPU), runs one forward
and backward pass at two batch sizes, and keeps what the cost model needs, per *unit* — the model cut where a
pipeline may cut it (:func:`plait.workloads.traced.tracing.choose_units`), with ``pre`` (what runs before the first
unit, an embedding or a stem) and ``post`` (after the last: a head and the loss) as units of their own:

- every kernel (ATen operator) of the forward and the backward: its FLOPs (PyTorch's ``FlopCounterMode``
  formulas) and the bytes of its operands and results, each affine in the batch (``fixed + per_example x b``:
  the weights a kernel reads do not grow with the batch, the activations do);
- the parameters the unit owns (names and shapes) and the activation bytes autograd saves for its backward
  (saved-tensor hooks), affine in the batch too;
- the bytes of the unit's output (what a pipeline stage boundary after it sends);
- the order in which parameters' gradients are complete in the backward pass (post-accumulate-grad hooks): what
  bucketed gradient reduction overlaps with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Kernel:
    """One ATen operator of a pass; FLOPs and bytes for a micro-batch of ``b`` examples are
    ``flops_per_example x b`` and ``fixed_bytes + bytes_per_example x b``."""

    name: str
    flops_per_example: float
    fixed_bytes: float
    bytes_per_example: float
    backward: bool
    tp_split: bool = False
    """The operator runs inside a Linear of a tensor-parallel pair (:class:`LinearPair`) or inside the module
    running a split attention's core: with ``tp`` ranks each runs ``1/tp`` of its FLOPs and bytes (where it has
    FLOPs, or :attr:`tp_split_all`)."""
    tp_split_all: bool = False
    """The operator runs in a split attention's core module outside its Linears (a rotary embedding, a copy of
    the heads): it acts on each rank's heads alone, so its bytes are ``1/tp`` too, FLOPs or none."""
    winograd: bool = False
    """A 3x3, stride-1, undilated, ungrouped convolution or its backward: the shape cuDNN's Winograd algorithms
    take (:func:`plait.workloads.traced.winograd.winograd_shape`)."""

    def flops(self, batch: float) -> float:
        return self.flops_per_example * batch

    def bytes(self, batch: float) -> float:
        return self.fixed_bytes + self.bytes_per_example * batch


@dataclass(frozen=True)
class Unit:
    """A contiguous piece of the model: a repeated block, or what runs before (``pre``) or after (``post``) them."""

    name: str
    kernels: tuple[Kernel, ...]
    params: tuple[tuple[str, Shape], ...]
    saved_fixed_bytes: float
    """Saved-for-backward bytes that do not grow with the batch (cast copies of weights)."""
    saved_bytes_per_example: float
    output_bytes_per_example: float
    split_saved_bytes_per_example: float = 0.0
    """The part of :attr:`saved_bytes_per_example` a tensor-parallel rank holds ``1/tp`` of: what the row-parallel
    Linears and a split attention's module (not its column-parallel Linears, which save their whole input) save."""

    @property
    def num_params(self) -> int:
        return sum(math.prod(s) for _, s in self.params)

    def saved_bytes(self, batch: float, tp: int = 1) -> float:
        """Saved-for-backward bytes at ``batch`` examples on one of ``tp`` ranks (:attr:`split_saved_bytes_per_example`
        at ``1/tp``)."""
        split = self.split_saved_bytes_per_example * (1.0 - 1.0 / tp)
        return self.saved_fixed_bytes + (self.saved_bytes_per_example - split) * batch

    def flops(self, batch: float, backward: bool) -> float:
        return sum(k.flops(batch) for k in self.kernels if k.backward == backward)


@dataclass(frozen=True)
class LinearPair:
    """Two ``nn.Linear`` of a repeated unit, the first's output feeding the second through elementwise operators
    only: Megatron's MLP split, the first column-parallel, the second row-parallel (Shoeybi et al. 2019, Sec. 3,
    Fig. 3a), found by :mod:`plait.workloads.traced.pairs`; or a self-attention split by heads, q (first) and k, v
    (gates) column-parallel, the output projection (second) row-parallel (Fig. 3b), found by
    :mod:`plait.workloads.traced.attention` (:attr:`heads` set)."""

    unit: int
    """The index of the unit (in :attr:`TracedWorkload.units`) that holds both."""
    first: str
    """Module path of the column-parallel Linear."""
    second: str
    """Module path of the row-parallel Linear."""
    hidden: int
    """The split dimension: the first's ``out_features``, the second's ``in_features``."""
    split_params: int
    """Parameters each of ``tp`` ranks holds ``1/tp`` of: the weights and the first's (and gates') biases (the
    second's bias is added once, after the all-reduce, so every rank holds it whole)."""
    gates: tuple[str, ...] = ()
    """Module paths of Linears split by columns like the first, whose outputs multiply the first's (a SwiGLU gate)."""
    output_bytes_per_example: float = 0.0
    """Bytes of the second Linear's output per example: what the forward all-reduce sums (and, as the input's
    gradient, the backward's)."""
    heads: tuple[int, ...] = ()
    """An attention's head counts of q, k and v (``tp`` must divide each); empty for an MLP pair."""
    core: str = ""
    """Module path of what runs an attention's core, its FLOPs split (empty: an MLP pair, or a module that holds
    other parameters too, whose core is then charged whole on every rank: an upper bound)."""

    @property
    def kind(self) -> str:
        """How messages name it."""
        return f"{'attention' if self.heads else 'Linear pair'} {self.first} -> {self.second}"

    def divides(self, tp: int) -> bool:
        """``tp`` divides what the split divides: every head count of an attention, the hidden features of a pair."""
        return all(h % tp == 0 for h in self.heads) if self.heads else self.hidden % tp == 0

    def split_dims(self) -> tuple[int, ...]:
        """What :meth:`divides` checks."""
        return self.heads or (self.hidden,)


@dataclass(frozen=True)
class TracedWorkload:
    """A model measured by tracing (module docstring)."""

    name: str
    """What the user named (``module:factory``)."""
    example_shape: Shape
    """One example's input shape (no batch dimension)."""
    input_dtype: str
    """The input's dtype (``float32``, ``bfloat16``, ``int64``)."""
    dtype: str
    """The dtype parameters and activations were traced in."""
    units: tuple[Unit, ...]
    grad_order: tuple[str, ...]
    """Parameter names in the order their gradients complete in the backward pass."""
    unit_class: str
    """The module class the repeated units are instances of."""
    pairs: tuple[LinearPair, ...] = ()
    """The tensor-parallel Linear pairs and attentions of the repeated units (none: tensor parallelism does not
    apply)."""
    no_pairs_reason: str = ""
    """Why :attr:`pairs` is empty, in words."""
    attention_note: str = ""
    """Why a unit's attention is not split by heads, in words (:mod:`plait.workloads.traced.attention`: the first
    refusal; empty where none was refused)."""

    @property
    def named_params(self) -> list[tuple[str, Shape]]:
        """Every parameter (name, shape), unit by unit."""
        return [p for u in self.units for p in u.params]

    def total_params(self) -> int:
        return sum(u.num_params for u in self.units)

    def flops_per_example(self, backward: bool | None = None) -> float:
        """Forward, backward or (``None``) both passes' FLOPs of one example."""
        return sum(k.flops_per_example for u in self.units for k in u.kernels
                   if backward is None or k.backward == backward)
