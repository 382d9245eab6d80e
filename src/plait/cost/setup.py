"""Quantities of one (model, cluster, plan) triple that every cost function needs.

Built once per estimate so that no cost function re-derives a degree or a size that
the Plan already owns (ARCHITECTURE.md, "the one flow").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from plait.engine.facts import AttentionKernel, EngineFacts
from plait.frozen import direct_init
from plait.hardware.cluster import Cluster
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.units import DTYPE_BYTES
from plait.workload.model import ModelSpec

T = TypeVar("T")


class cached_property(Generic[T]):  # noqa: N801 (named as the functools decorator it stands in for)
    """:func:`functools.cached_property` without its lock: Python 3.11's takes an ``RLock`` on every first read
    (3.12 dropped it), a measurable share of one estimate, which builds its Setups and reads them on one thread."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute, self.name = compute, compute.__name__
        self.__doc__ = compute.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]
        value = instance.__dict__[self.name] = self.compute(instance)  # read from the instance from now on
        return value


def residual_bytes(framework: EngineFacts, fsdp_managed: bool) -> int:
    """Bytes per residual-stream element: the framework's figure, or 2 where FSDP casts parameters to bf16."""
    return 2 if framework.fsdp_casts_params and fsdp_managed else framework.residual_bytes


@direct_init
@dataclass(frozen=True, kw_only=True)
class Setup:
    """Resolved sizes for one estimate (each derived size computed once, on first use)."""

    model: ModelSpec
    """The model."""
    cluster: Cluster
    """The cluster."""
    plan: Plan
    """The plan, with ``seq_len`` filled in."""
    framework: EngineFacts
    """How the framework implements the plan."""

    @cached_property
    def attention_kernel(self) -> AttentionKernel:
        """Fused flash attention, or unfused batched GEMMs + softmax storing the score matrix."""
        return self.framework.attention_kernel

    @cached_property
    def seq_len(self) -> int:
        """Tokens per sequence."""
        return self.plan.seq_len

    @cached_property
    def local_seq(self) -> int:
        """Tokens of one sequence on one context-parallel rank."""
        return self.plan.seq_len // self.plan.cp

    @cached_property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one rank (before TP): ``micro_batch * seq_len / cp``."""
        return self.plan.micro_batch * self.local_seq

    @cached_property
    def act_bytes(self) -> int:
        """Bytes per stored activation element: 2 (bf16/fp16; fp8 runs keep bf16 activations), 4 for fp32 and tf32
        runs (TF32 is a tensor-core math mode on fp32 storage: NVIDIA Ampere whitepaper, "TF32")."""
        return 4 if self.plan.precision in FULL_PRECISIONS else 2

    @cached_property
    def residual_bytes(self) -> int:
        """Bytes per element of the residual stream (hidden states between sublayers, norms, residual adds)."""
        if self.plan.precision in FULL_PRECISIONS:  # nothing is cast down: the residual stream stays fp32
            return 4
        return residual_bytes(self.framework, self.plan.fsdp_managed)

    @cached_property
    def gemm_dtype(self) -> str:
        """Dtype GEMMs run in: fp8, fp32 (CUDA-core/vector fp32), tf32 (tensor cores on fp32 operands), else bf16
        (fp16 stands in: :meth:`~plait.hardware.accelerator.Accelerator.peak_flops`)."""
        return self.plan.precision if self.plan.precision in ("fp8", *FULL_PRECISIONS) else "bf16"

    @cached_property
    def grad_bytes(self) -> int:
        """Bytes per gradient element in the gradient buffer and its reduction."""
        return DTYPE_BYTES[self.plan.grad_reduce_dtype]

    @cached_property
    def kv_heads_per_rank(self) -> int:
        """KV heads on one TP rank (replicated when tp exceeds num_kv_heads)."""
        return max(self.model.num_kv_heads // self.plan.tp, 1)

    @cached_property
    def comm_overlap(self) -> float:
        """Share of an overlapped interval that stays hidden (the accelerator's figure, :mod:`plait.cost.overlap`)."""
        return self.cluster.accelerator.efficiency.comm_overlap.value

    @cached_property
    def attention_kv_heads(self) -> int:
        """K/V heads the attention kernel reads on one TP rank: the query heads where the framework copies K/V out
        to them first (:attr:`EngineFacts.kv_repeat`) or the model uses MLA, else :attr:`kv_heads_per_rank`."""
        if self.framework.kv_repeat or self.model.mla:
            return self.model.num_heads // self.plan.tp
        return self.kv_heads_per_rank

    @cached_property
    def layers_per_stage(self) -> int:
        """Layers on the most loaded pipeline stage (ceil split, as Megatron with uneven layers)."""
        return -(-self.model.num_layers // self.plan.pp)
