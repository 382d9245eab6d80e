"""What an estimate returns: memory and time breakdowns plus derived throughput and cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING

from plait.cost.energy import StepEnergy, step_energy
from plait.cost.setup import cached_property
from plait.frozen import direct_init
from plait.plan.convergence import Convergence, averaging_replicas, convergence
from plait.plan.plan import Plan
from plait.sync import AllReduce

if TYPE_CHECKING:
    from plait.hardware.power_states import PowerStates

ALLREDUCE = convergence(AllReduce())


@direct_init
@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes on one GPU of one pipeline stage at its peak."""

    stage: int
    """Pipeline stage this breakdown describes (the most loaded one)."""
    weights_bytes: float
    """Model weights resident on the GPU (bf16 compute copy; shard under zero3)."""
    gradients_bytes: float
    """Gradient buffer (its shard under zero2/zero3)."""
    optimizer_bytes: float
    """fp32 master weights and optimizer moments (their shard under zero1+; 0 when offloaded)."""
    activations_bytes: float
    """Stored activations of every in-flight micro-batch, plus the one being recomputed."""
    comm_buffers_bytes: float
    """Unsharded parameter/gradient buffers of FSDP, DDP buckets."""
    runtime_reserved_bytes: float
    """CUDA context, library workspaces and NCCL buffers."""
    fragmentation_bytes: float
    """Caching-allocator fragmentation."""
    capacity_bytes: float
    """Device memory of the GPU."""
    inflight_micro_batches: float
    """Micro-batches whose activations are held at the peak."""
    host_activations_bytes: float = 0.0
    """Activations swapped out to host memory at the peak (``swap_activations``; not part of the total)."""
    host_capacity_bytes: float = float("inf")
    """Host memory per GPU (the cluster's ``host_memory_gib_per_gpu``)."""

    @property
    def total_bytes(self) -> float:
        """Everything above, summed."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.comm_buffers_bytes + self.runtime_reserved_bytes + self.fragmentation_bytes)

    @property
    def fits(self) -> bool:
        """Whether the total fits in device memory (and swapped activations in the GPU's share of host memory)."""
        return self.total_bytes <= self.capacity_bytes and self.host_activations_bytes <= self.host_capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        """Capacity minus total (negative when it does not fit)."""
        return self.capacity_bytes - self.total_bytes

    def items(self) -> list[tuple[str, float]]:
        """(name, bytes) of each component, in display order."""
        names = ("weights", "gradients", "optimizer", "activations", "comm_buffers", "runtime_reserved", "fragmentation")
        return [(n, getattr(self, f"{n}_bytes")) for n in names]


@direct_init
@dataclass(frozen=True, kw_only=True)
class TimeBreakdown:
    """Seconds of one optimizer step on the critical path; the components sum to the step time."""

    compute_s: float = 0.0
    """Forward and backward kernels (GEMMs, attention, memory-bound ops) of the slowest stage."""
    recompute_s: float = 0.0
    """Activation recomputation."""
    tp_comm_s: float = 0.0
    """Exposed tensor/sequence-parallel collectives."""
    cp_comm_s: float = 0.0
    """Exposed context-parallel (ring attention) transfers."""
    ep_comm_s: float = 0.0
    """Expert-parallel all-to-alls."""
    host_s: float = 0.0
    """Time the device waits for the host to issue kernels (:mod:`plait.cost.host`): a pass whose host is slower
    than its device work."""
    pp_p2p_s: float = 0.0
    """Pipeline point-to-point activation transfers."""
    pp_bubble_s: float = 0.0
    """Pipeline fill and drain."""
    fsdp_comm_s: float = 0.0
    """Exposed ZeRO-3/FSDP parameter gathers and gradient reduce-scatters, and parameter streaming from host."""
    swap_s: float = 0.0
    """Exposed activation swapping to and from host memory (:mod:`plait.cost.swap`)."""
    dp_comm_s: float = 0.0
    """Exposed data-parallel gradient reduction and parameter all-gather (once per step)."""
    optimizer_s: float = 0.0
    """Optimizer step (and host transfers when offloaded)."""
    input_wait_s: float = 0.0
    """Device time waiting for the input pipeline: the loader's step beyond the device's
    (:mod:`plait.cost.input_pipeline`)."""

    @property
    def total_s(self) -> float:
        """The step time."""
        return sum(_TIME_VALUES(self))

    def items(self) -> list[tuple[str, float]]:
        """(name, seconds) of each component."""
        return list(zip(_TIME_SHORT, _TIME_VALUES(self)))


_TIME_FIELDS = tuple((f.name, f.name.removesuffix("_s")) for f in fields(TimeBreakdown))
"""(field, name without ``_s``) of every component, in declaration order (``fields()`` builds its tuple per call)."""
_TIME_VALUES = attrgetter(*(name for name, _ in _TIME_FIELDS))
"""A breakdown's component values as a tuple in :data:`_TIME_FIELDS` order (one C-level call, not a getattr each)."""
_TIME_SHORT = tuple(short for _, short in _TIME_FIELDS)


IntervalOf = Callable[[TimeBreakdown, bool], tuple[float, float]]
"""The (p10, p90) step-time interval of a time breakdown (``True``: a mixture-of-experts model): the predict layer's
:func:`plait.predict.intervals.step_interval_s`, passed to the cost functions that build an :class:`Estimate`."""


@direct_init
@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Prediction for one (model, cluster, plan)."""

    model_name: str
    """Model display name."""
    cluster_name: str
    """Cluster display name."""
    engine: str
    """The engine the prediction is for (``name@version[options]``, :class:`plait.engine.engine.Engine`)."""
    plan: Plan
    """The plan estimated (``seq_len`` filled in)."""
    memory: MemoryBreakdown
    """Memory of the most loaded stage."""
    time: TimeBreakdown
    """Step-time breakdown."""
    interval_of: IntervalOf = field(repr=False, compare=False)
    """How the predict layer turns ``time`` into its (p10, p90) interval (:func:`plait.predict.intervals.
    step_interval_s`, handed to whoever builds the estimate); read through :attr:`step_time_interval_s`."""
    tokens_per_step: int
    """Tokens in one optimizer step (global batch x sequence length)."""
    model_flops_per_step: float
    """PaLM-convention model FLOPs of one step (6N + 12LHQT per token)."""
    hardware_flops_per_step: float
    """Model FLOPs plus recomputation (same convention)."""
    peak_flops_per_gpu: float
    """Dense peak of one GPU in the plan's matmul precision (:func:`plait.cost.compute.mfu_peak_flops`: bf16, fp8,
    the fp32 or the TF32 peak); MFU and HFU use it."""
    price_per_gpu_hour_usd: float
    """Price used for cost figures."""
    state_bytes: float = 0.0
    """What a checkpoint of the job holds, once: every parameter's compute copy plus its optimizer state
    (fp32 master copy and moments), whichever memory they live in."""
    storage_bytes_per_s_per_gpu: float | None = None
    """The cluster's checkpoint-store bandwidth per GPU (``None``: the cluster states none)."""
    egress_bytes_per_step: float = 0.0
    """Bytes leaving sites per step through the cluster's wide-area tier (:mod:`plait.cost.egress`)."""
    egress_usd_per_gb: float = 0.0
    """Price of one GB of that traffic (the wide-area tier's ``egress_usd_per_gb``)."""
    convergence: Convergence = ALLREDUCE
    """The plan's ``dp_sync`` steps multiplier and its source (:mod:`plait.plan.convergence`)."""
    num_params: float = 0.0
    """Parameters of the model (0: not counted)."""
    num_active_params: float = 0.0
    """Parameters each token passes through: fewer than ``num_params`` for mixture-of-experts models."""
    warnings: list[str] = field(default_factory=list)
    """Options with no effect and other notes."""
    moe_model: bool = False
    """Whether the model has mixture-of-experts layers (widens the interval, :mod:`plait.predict.intervals`)."""
    sample_unit: str = "tokens"
    """What ``tokens_per_step`` counts: tokens of a language model, or ``samples`` (examples) of a traced workload
    (:mod:`plait.workloads.traced.cost`)."""
    power: PowerStates | None = field(default=None, repr=False)
    """Watts per device state of the cluster's GPUs, hosts and network and its PUE (``None``: unknown, no energy)."""
    flop_convention: str = ("PaLM (6N + 12*L*H*Q*T per token), non-causal attention, vs the dense peak of the plan's "
                            "matmul precision")
    """How ``model_flops_per_step`` is counted."""

    @cached_property
    def step_time_interval_s(self) -> tuple[float, float]:
        """(p10, p90) of the step time: the nominal 80% conformal interval of ``time``, computed when first asked
        (the planner ranks most estimates without it)."""
        return self.interval_of(self.time, self.moe_model)

    @cached_property
    def energy_per_step(self) -> StepEnergy | None:
        """Joules of one step of the whole job by device state (:func:`plait.cost.energy.step_energy`; ``None``:
        the cluster's power is unknown), computed when first asked (the planner ranks most estimates without it)."""
        return None if self.power is None else step_energy(self.time, self.num_gpus, self.power)

    @property
    def joules_per_token(self) -> float | None:
        """Data-centre energy per trained token (per sample of a traced workload), J."""
        energy = self.energy_per_step
        return None if energy is None else energy.total_j / self.tokens_per_step

    def energy_j(self, tokens: float) -> float | None:
        """Data-centre energy to train to ``tokens`` tokens' target: steps x multiplier x energy per step, J."""
        energy = self.energy_per_step
        return None if energy is None else tokens / self.tokens_per_step * self.steps_multiplier * energy.total_j

    @property
    def step_time_s(self) -> float:
        """Predicted time of one optimizer step."""
        return self.time.total_s

    @property
    def num_gpus(self) -> int:
        """GPUs used."""
        return self.plan.num_gpus

    @property
    def tokens_per_s(self) -> float:
        """Training throughput."""
        return self.tokens_per_step / self.step_time_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Throughput per GPU."""
        return self.tokens_per_s / self.num_gpus

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation (PaLM convention, Chowdhery et al. 2022, App. B) against the dense peak of
        the plan's matmul precision (:func:`plait.cost.compute.mfu_peak_flops`: fp8 plans against the fp8 peak, as
        llm-foundry reports FP8 runs; fp32 plans against the fp32 peak, tf32 plans against the TF32 peak)."""
        return self.model_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_gpu)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: as MFU but counting recomputed forward passes."""
        return self.hardware_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_gpu)

    @property
    def steps_multiplier(self) -> float:
        """Steps the plan's synchronization needs per all-reduce step (1 where unknown: see ``convergence``)."""
        return self.convergence.factor

    @property
    def gossip_spectral_gap(self) -> float | None:
        """Spectral gap of a ``gossip`` plan's mixing over its averaging replicas (:func:`plait.plan.gossip.
        spectral_gap`; ``None`` for other methods)."""
        graph = self.plan.dp_sync.graph()
        if graph is None:
            return None
        from plait.plan.gossip import spectral_gap  # gossip only: with the random graphs' sampler

        replicas = averaging_replicas(self.plan.dp, self.plan.dp_replicate, self.plan.sharding)
        topology, peers = graph
        return spectral_gap(topology, replicas, peers)

    @property
    def target_tokens_per_s(self) -> float:
        """Throughput in all-reduce-equivalent tokens: tokens/s over the steps multiplier (what ranks plans)."""
        return self.tokens_per_s / self.steps_multiplier

    def time_to_train_s(self, tokens: float) -> float:
        """Time-to-target: wall time to reach the loss the all-reduce reaches in ``tokens`` tokens
        (steps x multiplier x step time)."""
        return tokens / self.target_tokens_per_s

    def gpu_hours(self, tokens: float) -> float:
        """GPU-hours to train on ``tokens`` tokens."""
        return self.time_to_train_s(tokens) * self.num_gpus / 3600.0

    def egress_usd(self, tokens: float) -> float:
        """Money for the bytes that leave sites while training to ``tokens`` tokens' target."""
        steps = tokens / self.tokens_per_step * self.steps_multiplier
        return steps * self.egress_bytes_per_step / 1e9 * self.egress_usd_per_gb

    def cost_usd(self, tokens: float) -> float:
        """Money to train on ``tokens`` tokens: GPU-hours at the cluster's price plus wide-area egress."""
        return self.gpu_hours(tokens) * self.price_per_gpu_hour_usd + self.egress_usd(tokens)

    def to_dict(self, train_tokens: float | None = None) -> dict[str, object]:
        """A JSON-ready summary."""
        low, high = self.step_time_interval_s
        out: dict[str, object] = {
            "model": self.model_name,
            "params": {"total": self.num_params, "active": self.num_active_params},
            "cluster": self.cluster_name,
            "engine": self.engine,
            "num_gpus": self.num_gpus,
            "plan": self.plan.to_dict(),
            "layout": self.plan.describe(),
            "step_time_s": self.step_time_s,
            "step_time_p10_s": low,
            "step_time_p90_s": high,
            "step_time_interval": "nominal 80% split-conformal interval, calibrated leave-one-source-out on public runs "
                                  "(plait.predict.intervals)",
            "time_breakdown_s": dict(self.time.items()),
            "memory_breakdown_bytes": dict(self.memory.items()),
            "memory_total_bytes": self.memory.total_bytes,
            "memory_capacity_bytes": self.memory.capacity_bytes,
            "memory_stage": self.memory.stage,
            "fits": self.memory.fits,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "flop_convention": self.flop_convention,
            "sample_unit": self.sample_unit,
            "egress_bytes_per_step": self.egress_bytes_per_step,
            "steps_multiplier": self.convergence.multiplier,
            "steps_multiplier_basis": self.convergence.basis,
            "steps_multiplier_source": self.convergence.source,
            "gossip_spectral_gap": self.gossip_spectral_gap,
            "energy_per_step": None if self.energy_per_step is None else self.energy_per_step.to_dict(),
            "energy_per_token_j": self.joules_per_token,
            "power": None if self.power is None else {f.name: {"value": getattr(self.power, f.name).value,
                                                               "source": getattr(self.power, f.name).source}
                                                      for f in fields(self.power)},
            "warnings": self.warnings,
        }
        if train_tokens:
            out["train"] = {
                "tokens": train_tokens,
                "time_s": self.time_to_train_s(train_tokens),
                "gpu_hours": self.gpu_hours(train_tokens),
                "cost_usd": self.cost_usd(train_tokens),
                "price_per_gpu_hour_usd": self.price_per_gpu_hour_usd,
                "egress_usd": self.egress_usd(train_tokens),
                "energy_j": self.energy_j(train_tokens),
            }
        return out
