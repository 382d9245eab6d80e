"""The run configurations of the workload workers (DiT, DLRM, and ``plait converge``'s ranks): one frozen
dataclass each, read by :func:`plait.run.config.read_config` from ``--config FILE`` or from options (torch-free, so
the CLI builds what the ranks read without importing the runtime)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from plait.run.config import APPEND, COMMA, POSITIONAL


@dataclass(frozen=True, kw_only=True)
class DitConfig:
    """A small DiT denoised in parallel (:mod:`plait.workloads.dit.worker`): the degrees multiply to the ranks."""

    cfg: int = 1
    """CFG parallel degree (2: the guided pair on two ranks; needs --guidance)"""
    pipefusion: int = 1
    """PipeFusion stages"""
    patches: int = 2
    """PipeFusion patches per image"""
    distrifusion: int = 1
    """DistriFusion patches (stale K, V)"""
    ring: int = 1
    """ring attention degree"""
    ulysses: int = 1
    """Ulysses degree"""
    tp: int = 1
    """tensor parallel degree"""
    guidance: float = 0.0
    """classifier-free guidance scale (0: one unguided pass)"""
    offload: int = 0
    """1: the blocks' weights streamed in layer by layer from a host copy (emulated)"""
    ranks: int = 0
    """1: the single-process reference"""
    hidden: int = 64
    """hidden width"""
    heads: int = 4
    """attention heads"""
    layers: int = 2
    """DiT blocks"""
    side: int = 8
    """patches per side of the latent (tokens = side^2)"""
    patch: int = 2
    """patch size"""
    channels: int = 4
    """latent channels"""
    batch: int = 2
    """images"""
    steps: int = 4
    """denoising steps"""
    warmup: int = 1
    """distrifusion, pipefusion: synchronous steps first"""
    check: bool = False
    """distrifusion, pipefusion: compare each stale attention with the exact"""
    seed: int = 0
    """seed of the weights and the noise"""
    out: Path
    """JSON file rank 0 writes"""


@dataclass(frozen=True, kw_only=True)
class DlrmConfig:
    """A DLRM's placement trained on TorchRec (:mod:`plait.workloads.dlrm.worker`)."""

    model: Path
    """DLRM TOML"""
    placements: str
    """t0=row_wise,t1=table_wise@1,t2=column_wise@0+1,..."""
    batch: int = 4
    """samples per rank"""
    steps: int = 3
    """optimizer steps"""
    optimizer: Literal["sgd", "rowwise_adagrad"] = "sgd"
    """sgd | rowwise_adagrad"""
    reference: int = 0
    """train one process on the global batch of this many ranks instead"""
    sparse_group: int = 0
    """ranks that share the tables (0: all; fewer: 2D sparse parallelism, TorchRec's DMPCollection)"""
    out: Path
    """JSON file rank 0 writes"""


LEARNING_RATES = {"sgd": 0.05, "adamw": 1e-3}
"""Inner learning rates of ``plait converge``'s runs, synchronous and asynchronous (assumed: what trains the tiny
reference model steadily in tens of steps). Here, without torch: ``plait converge`` checks its options with them
before it starts the ranks."""


@dataclass(frozen=True, kw_only=True)
class ConvergeConfig:
    """``plait converge``'s synchronous methods (:mod:`plait.run.converge`)."""

    out: Path
    """JSON file rank 0 writes"""
    model: str
    """model preset or file"""
    steps: int = 10
    """optimizer steps"""
    batch: int = 8
    """global batch (sequences per step)"""
    cluster: str = ""
    """cluster preset or file the ranks lie on (sites: hierarchical)"""
    cases: tuple[str, ...] = field(metadata={"form": POSITIONAL})
    """METHOD[:key=value,...]@sgd|adamw"""


@dataclass(frozen=True, kw_only=True)
class AsyncConfig:
    """Asynchronous methods on workers and server ranks (:mod:`plait.run.async_train`)."""

    out: Path
    """JSON file rank 0 writes: each method's result"""
    model: str
    """model preset or file"""
    spec: tuple[str, ...] = field(metadata={"form": APPEND})
    """dp_sync method (async_ps, easgd, param_server:host=cpu, or any synchronous one); repeatable: each runs in
    turn, from the same weights"""
    workers: int = 0
    """worker ranks (0: the world less the server ranks the methods need)"""
    steps: int = 10
    """iterations per worker (without --seconds)"""
    seconds: float = 0.0
    """wall time each worker trains for"""
    batch: int = 8
    """global batch: every worker takes its share"""
    optimizer: Literal["adamw", "sgd"] = "sgd"
    """inner optimizer"""
    bf16: bool = False
    """forward under bf16 autocast (CPU), as plait run's bf16"""
    slow: tuple[str, ...] = field(default=(), metadata={"form": APPEND})
    """RANK:SECONDS slept by that worker every iteration"""
    slowdown: tuple[float, ...] = field(default=(), metadata={"form": COMMA})
    """per worker, times slower at compute, e.g. 1,3: after its forward and backward a worker sleeps (factor - 1)
    times what they took (plait run --slowdown)"""

    @property
    def slow_s(self) -> dict[int, float]:
        """Seconds slept per iteration, by worker rank."""
        return {int(rank): float(seconds) for rank, seconds in (s.split(":") for s in self.slow)}


@dataclass(frozen=True, kw_only=True)
class TracedConfig:
    """A traced module's data-parallel plan trained on torch.distributed (:mod:`plait.workloads.traced.worker`)."""

    factory: str
    """module:attr of the model's factory"""
    input_shape: tuple[int, ...] = field(metadata={"form": COMMA})
    """one example's input shape, e.g. 3,32,32"""
    input_dtype: Literal["float32", "bfloat16", "float16", "int64"] = "float32"
    """the input's dtype"""
    dp_replicate: int = 1
    """replicas that hold whole copies (DDP, or HSDP's replicate axis)"""
    dp_shard: int = 1
    """ranks that shard the model's state among themselves"""
    sharding: Literal["none", "zero1", "zero2", "zero3"] = "none"
    """what the dp_shard ranks shard: zero1 optimizer, zero2 + gradients, zero3 + weights"""
    recompute_units: int = 0
    """repeated units whose activations are recomputed in the backward (-1: all)"""
    pp: int = 1
    """pipeline stages"""
    tp: int = 1
    """tensor-parallel ranks over the units' Linear pairs (column- then row-parallel; with unsharded replicas)"""
    stage_starts: tuple[int, ...] = field(default=(), metadata={"form": COMMA})
    """with pp > 1: the index of the traced unit each stage after the first begins at, e.g. 3"""
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    """pipeline schedule"""
    micro_batch: int = 1
    """examples per micro-batch per rank"""
    global_batch: int = 1
    """examples per optimizer step over the job"""
    optimizer: Literal["adamw", "sgd"] = "adamw"
    """AdamW, or SGD with momentum"""
    dp_sync: str = "allreduce"
    """how unsharded replicas synchronize, METHOD[:key=value,...] (plait.sync)"""
    bf16: bool = False
    """forward under bf16 autocast"""
    steps: int = 4
    """optimizer steps"""
    lr: float = 1e-3
    """learning rate"""
    seed: int = 0
    """seed of the weights and the data"""
    reference: bool = False
    """train in this one process, the global batch in micro-batches of the same size"""
    out: Path
    """JSON file rank 0 writes"""
