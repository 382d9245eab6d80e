"""The parallel plan: degrees, schedule, memory knobs and precision of one training job.

One frozen object flows through estimate -> search -> simulate -> export -> run
(ARCHITECTURE.md). Degrees multiply to the GPU count: ``world = pp * dp * cp * tp``
with ``dp = dp_replicate * dp_shard``; expert parallelism is carved out of the
``dp * cp`` ranks of a stage, as Megatron-Core and torchtitan do. Ranks are laid out
tp fastest, then cp, then dp (shard, then replicate), then pp slowest — the Megatron-LM
and torchtitan default order — which decides which network tier each group crosses.
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

from dataclasses import asdict, dataclass, fields, replace
from operator import attrgetter
from typing import Any, Literal, get_args

from plait.errors import ConfigError
from plait.sync import ALLREDUCE, SyncMethod, parse

Schedule = Literal["gpipe", "1f1b", "interleaved", "zb-h1"]
Sharding = Literal["none", "zero1", "zero2", "zero3"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "fp32", "tf32"]
FULL_PRECISIONS = ("fp32", "tf32")
"""Precisions that store weights, gradients and activations in fp32: no 16-bit compute copy, no master copy."""
GradDtype = Literal["fp32", "bf16"]
Optimizer = Literal["adamw", "sgd"]
CpAttention = Literal["ring", "ulysses", "lss"]
TpMode = Literal["1d", "2d", "2.5d"]


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How one model is trained on one cluster. Validate with :func:`plait.plan.rules.check_plan`."""

    tp: int = 1
    """Tensor-parallel degree (Megatron-style column/row sharding)."""
    tp_mode: TpMode = "1d"
    """How the ``tp`` ranks split a layer's matrices: ``1d`` is Megatron's column/row sharding; ``2d`` a ``q x q``
    grid (``tp = q*q``) running SUMMA (van de Geijn & Watts 1997) on every linear layer, activations split by batch
    over the grid's rows and by hidden over its columns; ``2.5d`` stacks ``tp_depth`` such grids (``tp = q*q*d``),
    the batch split over them and the weights kept on each (Tesseract, Wang et al. 2021, arXiv 2105.14500).
    Costed in :mod:`plait.cost.tp2d`."""
    tp_depth: int = 1
    """Depth ``d`` of a ``2.5d`` grid (>= 2); 1 otherwise."""
    sp: bool = False
    """Sequence parallelism: shard norm/dropout activations over the TP group (Korthikanti et al. 2022)."""
    pp: int = 1
    """Pipeline-parallel stages."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule."""
    vpp: int = 1
    """Virtual stages (model chunks) per pipeline rank; > 1 only with ``interleaved``."""
    cp: int = 1
    """Context-parallel degree (sequence split across ranks)."""
    cp_attention: CpAttention = "ring"
    """How attention spans the cp ranks: ``ring`` passes K/V blocks around them (Liu et al. 2023; head-tail load
    balanced, exchanged as the engine's ``cp_kv_exchange`` says); ``ulysses`` all-to-alls Q, K, V from a split of the
    sequence to a split of the heads and the output back (DeepSpeed-Ulysses, Jacobs et al. 2023): cp divides the
    heads of a TP rank; ``lss`` gathers every rank's K and V in one fused all-gather and each rank attends its own
    queries over the whole sequence, the gradients of the gathered K/V reduce-scattered back in one collective
    (LSS Transformer, Wang et al. 2023, arXiv:2311.02382: segment-parallel attention with fused communication;
    head-tail load balanced as the ring)."""
    ep: int = 1
    """Expert-parallel degree (MoE only); divides ``dp * cp``."""
    dp_replicate: int = 1
    """Data-parallel replicas that hold full copies (DDP, or the replicate axis of HSDP)."""
    dp_shard: int = 1
    """Data-parallel ranks that shard state among themselves (ZeRO/FSDP group)."""
    sharding: Sharding = "none"
    """What the ``dp_shard`` group shards: zero1 optimizer, zero2 +gradients, zero3 +weights (FSDP)."""
    recompute: Recompute = "none"
    """Activation recomputation mode."""
    recompute_layers: int = -1
    """Layers per stage fully recomputed when ``recompute='full'`` (-1: all of them)."""
    micro_batch: int = 1
    """Sequences per micro-batch per data-parallel rank."""
    global_batch: int = 1
    """Sequences per optimizer step over the whole job."""
    seq_len: int = 0
    """Tokens per sequence (0: the model's default)."""
    precision: Precision = "bf16"
    """Matmul precision; fp8 runs GEMMs in fp8 with bf16 master copies (Transformer Engine style); fp32 runs
    everything in fp32 (GEMMs at the fp32 peak); tf32 stores fp32 and runs GEMMs on TF32 tensor cores (Ampere and
    later). Under fp32 and tf32 the weights are the fp32 copy, so :attr:`master_weights` adds nothing."""
    grad_reduce_dtype: GradDtype = "fp32"
    """Dtype of the gradient buffer and its data-parallel reduction."""
    optimizer: Optimizer = "adamw"
    """Optimizer; AdamW keeps two fp32 moments."""
    master_weights: bool = True
    """Keep an fp32 master copy of the weights (mixed precision, Micikevicius et al. 2018)."""
    offload_optimizer: bool = False
    """Keep optimizer state (and master weights) in host memory; the step runs on the CPU."""
    offload_params: bool = False
    """Keep sharded weights in host memory and stream them in per layer (ZeRO-Infinity style)."""
    swap_activations: bool = False
    """Move the activations saved for the backward to host memory during the forward and bring them back, one
    layer ahead, for the backward (LMS, Le et al. 2018, arXiv 1811.12174; PyTorch's saved-tensor hooks): the device
    keeps the layer in flight and the prefetched one; the copies cross the host link (:mod:`plait.cost.swap`)."""
    swap_layers: int = -1
    """Layers per stage whose saved activations swap when ``swap_activations`` is on: the first ``swap_layers`` in
    forward order, as Transformer Engine's CPU offload takes Megatron-Core's ``cpu_offloading_num_layers``
    (``transformer_engine/pytorch/cpu_offload.py``: a saved tensor is offloaded while its layer group is below
    ``num_offload_group``); the other layers, the embedding and the head keep theirs on the device. -1: every saved
    tensor of the stage, the embedding's included (plait's runtime hooks)."""
    overlap_grad_reduce: bool = True
    """Overlap the data-parallel gradient reduction with the last backward pass."""
    tp_comm_overlap: bool = False
    """Overlap TP collectives with GEMMs (async TP / Transformer Engine userbuffers). Optimistic: the cost
    model hides TP traffic behind the layer's GEMMs without modelling the interference."""
    overlap_chunks: int = 1
    """Split each TP GEMM group and its all-gather / reduce-scatter (or all-reduce), and each MoE expert block and
    its all-to-alls, into this many row chunks whose collectives run while the next chunk computes (fused
    computation-collectives, Punniyamurthy et al., SC 2024; :mod:`plait.cost.chunked`); 1: no chunking, at most
    :data:`MAX_OVERLAP_CHUNKS`. An alternative to ``tp_comm_overlap``, not combined with it."""
    dp_sync: SyncMethod = ALLREDUCE
    """How data-parallel replicas synchronize (:mod:`plait.sync`): the all-reduce every step, or a compressed,
    infrequent, aggregating or asynchronous method. Text ``METHOD[:key=value,...]`` given here is parsed."""
    stage_recompute: tuple[Recompute, ...] = ()
    """Per pipeline stage, its recomputation mode (empty: ``recompute`` on every stage). Under 1F1B stage ``i`` holds
    ``pp - i`` micro-batches' activations, so the first stages may recompute where the last need not (Galvatron,
    Miao et al., VLDB 2023, arXiv 2211.13878: a strategy per layer under a memory budget); when given, ``recompute``
    is the first stage's mode. :mod:`plait.cost.per_stage` costs it."""
    stage_layers: tuple[int, ...] = ()
    """Per pipeline stage, the transformer layers it holds, summing to the model's (empty: as even as possible, the
    first stages taking the remainder): an uneven split gives a stage that recomputes fewer layers (Alpa, Zheng et
    al., OSDI 2022, arXiv 2201.12023: stages balanced by dynamic programming)."""
    stage_sharding: tuple[Sharding, ...] = ()
    """Per pipeline stage, what its ``dp_shard`` ranks shard (empty: ``sharding`` on every stage). Each stage has its
    own data-parallel group, so a stage that holds more in-flight activations may shard its states further (ZeRO,
    Rajbhandari et al., SC 2020, Sec. 5: stages 1-3 trade memory for communication); when given, ``sharding`` is the
    first stage's. :mod:`plait.cost.per_stage` costs it."""
    stage_tp: tuple[int, ...] = ()
    """Per pipeline stage, its tensor-parallel degree (empty: ``tp`` on every stage). A stage may take more GPUs
    than another (Alpa, Zheng et al., OSDI 2022, Sec. 5: each stage its own submesh; Galvatron and Aceso search a
    TP degree per stage), so the job occupies ``dp * cp * sum(stage_tp)`` GPUs; when given, ``tp`` is the first
    stage's. Each stage meets the uniform TP rules at its own degree (:func:`plait.plan.rules.check_plan`);
    :mod:`plait.cost.per_stage` costs it."""

    def __post_init__(self) -> None:
        for name in _INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not -LIMIT <= value <= LIMIT:
                raise ConfigError(f"{name}={value!r} must be an integer of magnitude <= {LIMIT}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be one of {', '.join(choices)}")
        if self.swap_layers < -1:
            raise ConfigError(f"swap_layers={self.swap_layers} must be -1 (every saved tensor) or a layer count >= 0")
        if not 1 <= self.overlap_chunks <= MAX_OVERLAP_CHUNKS:
            raise ConfigError(f"overlap_chunks={self.overlap_chunks} must be in 1..{MAX_OVERLAP_CHUNKS}")
        if self.overlap_chunks > 1 and self.tp_comm_overlap:
            raise ConfigError(f"overlap_chunks={self.overlap_chunks} and tp_comm_overlap=true are two ways to overlap "
                              "the same TP collectives: choose one")
        _check_stage_fields(self)
        if isinstance(self.dp_sync, str):  # text entering: a plan file, an option, a test
            object.__setattr__(self, "dp_sync", parse(self.dp_sync))
        elif not isinstance(self.dp_sync, SyncMethod):
            raise ConfigError(f"dp_sync={self.dp_sync!r} must be a string METHOD[:key=value,...]")

    def __eq__(self, other: object) -> bool:
        """Every compared field equal (as the dataclass's own ``__eq__``, which compares the same tuples), in one
        C-level tuple comparison: the dataclass's builds both tuples a field at a time (some 200 interpreter steps), and
        a plan built again (a sweep's, :meth:`with_seq_len`'s) meets its equal in the caches of :meth:`__hash__`."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _COMPARED(self) == _COMPARED(other)  # type: ignore[no-any-return]

    def __hash__(self) -> int:
        """The hash of every compared field (as the dataclass's own), kept on the plan: one estimate looks its plan up
        in several caches (the rules checked, the engine's refusals), each lookup and entry hashing it again, and a
        plan's hash walks some forty fields and its synchronization method's. Not pickled (:meth:`__getstate__`:
        strings hash differently in another process)."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = hash(_COMPARED(self))
        return found  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        """The fields, without the kept hash (:meth:`__hash__`)."""
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    # --- derived sizes -------------------------------------------------------------------
    @property
    def dp(self) -> int:
        """Data-parallel degree."""
        return self.dp_replicate * self.dp_shard

    @property
    def num_gpus(self) -> int:
        """GPUs the plan occupies: ``pp * dp * cp * tp``, or ``dp * cp * sum(stage_tp)`` where stages differ in
        TP degree."""
        return self.dp * self.model_parallel

    @property
    def fsdp_managed(self) -> bool:
        """Whether FSDP (zero2/zero3) wraps the model: its parameters are sharded over more than one dp x cp rank."""
        return self.dp * self.cp > 1 and self.sharding in ("zero2", "zero3")

    @property
    def model_parallel(self) -> int:
        """GPUs that hold one copy of the model: ``tp * pp * cp``, or ``sum(stage_tp) * cp`` where stages differ in
        TP degree."""
        return self.cp * (sum(self.stage_tp) if self.stage_tp else self.pp * self.tp)

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per step per pipeline (gradient-accumulation steps)."""
        per_replica = self.global_batch // self.dp
        return max(per_replica // self.micro_batch, 1)

    def with_seq_len(self, default_seq_len: int) -> "Plan":
        """The plan with ``seq_len`` filled from the model when it is 0."""
        if self.seq_len:
            return self
        if isinstance(default_seq_len, bool) or not isinstance(default_seq_len, int) or not 0 < default_seq_len <= LIMIT:
            return replace(self, seq_len=default_seq_len)  # checked by __post_init__, which names the rule
        filled = object.__new__(Plan)  # every other field was checked when this plan was built: copied as it is
        filled.__dict__.update(self.__dict__, seq_len=default_seq_len)
        filled.__dict__.pop("_hash", None)  # another plan's
        return filled

    @property
    def per_stage(self) -> bool:
        """Whether stages differ in recomputation, layer count, sharding or TP degree (:attr:`stage_recompute`,
        :attr:`stage_layers`, :attr:`stage_sharding`, :attr:`stage_tp`)."""
        return bool(self.stage_recompute or self.stage_layers or self.stage_sharding or self.stage_tp)

    def uniform(self) -> "Plan":
        """The plan with the per-stage fields cleared (every stage as ``recompute`` says, layers split evenly)."""
        return replace(self, stage_recompute=(), stage_layers=(), stage_sharding=(), stage_tp=()) if self.per_stage \
            else self

    def for_stage(self, stage: int) -> "Plan":
        """The uniform plan stage ``stage`` runs as: its own recomputation mode, sharding and TP degree (its layers
        are the caller's)."""
        mode = self.stage_recompute[stage] if self.stage_recompute else self.recompute
        layers = self.recompute_layers if mode == "full" else -1
        sharding = self.stage_sharding[stage] if self.stage_sharding else self.sharding
        tp = self.stage_tp[stage] if self.stage_tp else self.tp
        return replace(self, tp=tp, recompute=mode, recompute_layers=layers, sharding=sharding, stage_recompute=(),
                       stage_layers=(), stage_sharding=(), stage_tp=())

    def describe(self) -> str:
        """A compact one-line layout, e.g. ``tp8 pp4(interleaved x3) dp32 zero1 mb1 gb1536``."""
        grid = {"1d": "", "2d": "(2d)", "2.5d": f"(2.5d x{self.tp_depth})"}[self.tp_mode]
        parts = [f"tp{self.tp}{grid}{'+sp' if self.sp and self.tp > 1 and self.tp_mode == '1d' else ''}"]
        if self.pp > 1:
            parts.append(f"pp{self.pp}({self.schedule}{f' x{self.vpp}' if self.vpp > 1 else ''})")
        if self.cp > 1:
            parts.append(f"cp{self.cp}{'' if self.cp_attention == 'ring' else f'({self.cp_attention})'}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        dp = f"dp{self.dp}" if self.dp_replicate == 1 or self.dp_shard == 1 else f"dp{self.dp_replicate}x{self.dp_shard}"
        parts.append(dp)
        if self.sharding != "none":
            parts.append(self.sharding)
        if self.recompute != "none":
            layers = f"[{self.recompute_layers}]" if self.recompute == "full" and self.recompute_layers >= 0 else ""
            parts.append(f"rc-{self.recompute}{layers}")
        parts += [f"mb{self.micro_batch}", f"gb{self.global_batch}", self.precision]
        if self.offload_optimizer:
            parts.append("offload-opt")
        if self.offload_params:
            parts.append("offload-params")
        if self.swap_activations:
            parts.append(f"swap-act[{self.swap_layers}]" if self.swap_layers >= 0 else "swap-act")
        if self.overlap_chunks > 1:
            parts.append(f"chunks{self.overlap_chunks}")
        if not self.dp_sync.is_allreduce:
            parts.append(f"sync={self.dp_sync.spec}")
        if self.per_stage:
            modes = self.stage_recompute or (self.recompute,) * self.pp
            layers = self.stage_layers or ("",) * self.pp
            shards = [_SHARD_MARK[z] for z in self.stage_sharding] if self.stage_sharding else [""] * self.pp
            tps = [f"/tp{t}" for t in self.stage_tp] if self.stage_tp else [""] * self.pp
            entries = [f"{n}{_MODE_LETTER[r]}{z}{t}" for n, r, z, t in zip(layers, modes, shards, tps)]
            runs: list[list[Any]] = []
            for entry in entries:  # equal neighbours once, with their count: stages[1n,62x2n,1n]
                if runs and runs[-1][0] == entry:
                    runs[-1][1] += 1
                else:
                    runs.append([entry, 1])
            parts.append("stages[" + ",".join(e if k == 1 else f"{k}x{e}" for e, k in runs) + "]")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, as plain values (the synchronization method as its canonical spec text, the per-stage
        tuples as lists)."""
        return {**asdict(self), "dp_sync": self.dp_sync.spec, "stage_recompute": list(self.stage_recompute),
                "stage_layers": list(self.stage_layers), "stage_sharding": list(self.stage_sharding),
                "stage_tp": list(self.stage_tp)}


MAX_OVERLAP_CHUNKS = 64
"""Largest ``overlap_chunks`` (assumed: past 64 chunks each chunk's collective latency dominates any overlap)."""
LIMIT = 2**31 - 1
"""Largest degree, batch or length a plan may state (the cost model's integer columns are 64-bit; products of a
few of these must not overflow)."""
_INTS = ("tp", "tp_depth", "pp", "vpp", "cp", "ep", "dp_replicate", "dp_shard", "recompute_layers", "micro_batch",
         "global_batch", "seq_len", "overlap_chunks", "swap_layers")
_CHOICES = {
    "schedule": get_args(Schedule), "sharding": get_args(Sharding), "recompute": get_args(Recompute),
    "precision": get_args(Precision), "grad_reduce_dtype": get_args(GradDtype), "optimizer": get_args(Optimizer),
    "cp_attention": get_args(CpAttention), "tp_mode": get_args(TpMode),
}
_COMPARED = attrgetter(*(f.name for f in fields(Plan) if f.compare))
"""A plan's compared fields as a tuple (what :meth:`Plan.__hash__` hashes)."""
PER_STAGE_FIELDS = ("stage_recompute", "stage_layers", "stage_sharding", "stage_tp")
"""Plan fields that hold one value per pipeline stage (not plan columns: a plan that has them is costed one stage
at a time, :mod:`plait.cost.per_stage`)."""
_MODE_LETTER = {"none": "n", "selective": "s", "full": "f"}
"""How :meth:`Plan.describe` writes a stage's recomputation: ``stages[20f,20s,19n]``."""
_SHARD_MARK = {"none": "/z0", "zero1": "/z1", "zero2": "/z2", "zero3": "/z3"}
"""How :meth:`Plan.describe` writes a stage's own sharding: ``stages[20f/z3,2x20n/z1]``."""


def _check_stage_fields(plan: Plan) -> None:
    """The per-stage tuples where they enter: one entry per stage, known modes, positive layer counts and degrees."""
    for name in PER_STAGE_FIELDS:
        value = getattr(plan, name)
        if isinstance(value, list):  # a list entering from a file or a test: kept as the tuple the field types
            value = tuple(value)
            object.__setattr__(plan, name, value)
        if not isinstance(value, tuple):
            raise ConfigError(f"{name}={value!r} must be a list with one entry per pipeline stage")
        if value and len(value) != plan.pp:
            raise ConfigError(f"{name} has {len(value)} entries; it must have one per pipeline stage (pp={plan.pp})")
    for mode in plan.stage_recompute:
        if mode not in _CHOICES["recompute"]:
            raise ConfigError(f"stage_recompute entry {mode!r} must be one of {', '.join(_CHOICES['recompute'])}")
    for count in plan.stage_layers:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= LIMIT:
            raise ConfigError(f"stage_layers entry {count!r} must be an integer in 1..{LIMIT}")
    for sharding in plan.stage_sharding:
        if sharding not in _CHOICES["sharding"]:
            raise ConfigError(f"stage_sharding entry {sharding!r} must be one of {', '.join(_CHOICES['sharding'])}")
    for degree in plan.stage_tp:
        if isinstance(degree, bool) or not isinstance(degree, int) or not 0 < degree <= LIMIT:
            raise ConfigError(f"stage_tp entry {degree!r} must be an integer in 1..{LIMIT}")
    if plan.stage_tp and plan.stage_tp[0] != plan.tp:
        raise ConfigError(f"tp={plan.tp} must be the first stage's degree (stage_tp[0]={plan.stage_tp[0]})")
    if plan.stage_sharding and plan.stage_sharding[0] != plan.sharding:
        raise ConfigError(f"sharding={plan.sharding!r} must be the first stage's (stage_sharding[0]="
                          f"{plan.stage_sharding[0]!r})")
    if plan.stage_recompute and plan.stage_recompute[0] != plan.recompute:
        raise ConfigError(f"recompute={plan.recompute!r} must be the first stage's mode "
                          f"(stage_recompute[0]={plan.stage_recompute[0]!r})")
