"""The run configurations of the workload workers (GNN, DiT, DLRM, and ``plait converge``'s ranks): one frozen
dataclass each, read by :func:`plait.run.config.read_config` from ``--config FILE`` or from options (torch-free, so
the CLI builds what the ranks read without importing the runtime)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from plait.cost.gnn import LLCG_CORRECTIONS, LLCG_LOCAL_STEPS
from plait.errors import ConfigError
from plait.run.config import APPEND, POSITIONAL
from plait.workload.gnn import GnnKind


@dataclass(frozen=True, kw_only=True)
class GraphConfig:
    """The generated graph (:mod:`plait.run.graph`) every GNN worker trains on, and where its result goes."""

    nodes: int = 4000
    """nodes of the generated graph"""
    edges: int = 20000
    """undirected edges of the generated graph (about)"""
    features: int = 16
    """features per node"""
    classes: int = 4
    """label classes"""
    exponent: float = 2.5
    """power-law exponent of the expected degrees"""
    seed: int = 0
    """seed of the graph, the weights and the seeds drawn"""
    reference: int = 0
    """ranks to emulate in one process"""
    out: Path
    """JSON file rank 0 writes"""


@dataclass(frozen=True, kw_only=True)
class GnnConfig(GraphConfig):
    """Sampled data parallelism (:mod:`plait.run.gnn`)."""

    mix: float = 0.2
    """share of edges drawn between parts"""
    kind: GnnKind = "sage"
    """the GNN layer"""
    heads: int = 1
    """attention heads (gat, transformer)"""
    hidden: int = 32
    """hidden width"""
    fanouts: tuple[int, ...] = (5, 3)
    """neighbours sampled per hop"""
    batch: int = 32
    """seeds per rank"""
    steps: int = 3
    """optimizer steps"""
    cache: float = 0.0
    """fraction of nodes whose features every rank caches"""
    sampler: Literal["loop", "matrix"] = "loop"
    """one batch at a time, or matrix-based bulks (plait.run.bulk_sampler)"""
    bulk: int = 1
    """batches per bulk (matrix sampler)"""
    adjacency: Literal["replicated", "partitioned"] = "replicated"
    """the matrix sampler's adjacency: on every rank, or each rank's rows only"""
    lr: float = 0.1
    """learning rate"""

    def __post_init__(self) -> None:
        """Refuse bulk options without the matrix sampler."""
        if self.bulk < 1 or (self.sampler == "loop" and (self.bulk > 1 or self.adjacency != "replicated")):
            raise ConfigError(f"--bulk {self.bulk} and --adjacency {self.adjacency} need --sampler matrix (and "
                              "--bulk >= 1)")


@dataclass(frozen=True, kw_only=True)
class GnnLocalConfig(GnnConfig):
    """Partition-local training or LLCG (:mod:`plait.run.gnn_local`)."""

    strategy: Literal["partition_local", "llcg"] = "partition_local"
    """each rank inside its part, or LLCG's local steps, averaging and server correction"""
    local_steps: int = LLCG_LOCAL_STEPS
    """LLCG: local steps between averagings"""
    corrections: int = LLCG_CORRECTIONS
    """LLCG: server steps per averaging"""

    def __post_init__(self) -> None:
        """Refuse a round without local steps."""
        if self.local_steps < 1 or self.corrections < 0:
            raise ConfigError(f"--local-steps {self.local_steps} must be >= 1 and --corrections {self.corrections} "
                              ">= 0")


@dataclass(frozen=True, kw_only=True)
class GnnPipeConfig(GraphConfig):
    """Full-graph GraphSAGE through GNNPipe's layer pipeline (:mod:`plait.run.gnn_pipe`)."""

    nodes: int = 2000
    """nodes of the generated graph"""
    edges: int = 10000
    """undirected edges of the generated graph (about)"""
    hidden: int = 32
    """hidden width"""
    layers: int = 2
    """GraphSAGE layers: one per rank"""
    chunks: int = 4
    """node chunks pipelined through the layers"""
    steps: int = 3
    """epochs (one update each)"""
    lr: float = 0.5
    """learning rate"""

    def __post_init__(self) -> None:
        """Refuse more chunks than nodes."""
        if self.chunks < 1 or self.chunks > self.nodes:
            raise ConfigError(f"--chunks {self.chunks} must lie in [1, nodes={self.nodes}]")


@dataclass(frozen=True, kw_only=True)
class DitConfig:
    """A small DiT denoised by Ulysses or DistriFusion (:mod:`plait.workloads.dit.worker`)."""

    sp: Literal["ulysses", "distrifusion"] = "ulysses"
    """sequence parallelism"""
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
    """distrifusion: synchronous steps first"""
    check: bool = False
    """distrifusion: compare each stale attention with the exact"""
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
    out: Path
    """JSON file rank 0 writes"""


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

    @property
    def slow_s(self) -> dict[int, float]:
        """Seconds slept per iteration, by worker rank."""
        return {int(rank): float(seconds) for rank, seconds in (s.split(":") for s in self.slow)}
