"""The run configurations of the GNN workers (:mod:`.worker`, :mod:`.local_worker`, :mod:`.pipe_worker`): one frozen
dataclass each, read by :func:`plait.run.config.read_config` from ``--config FILE`` or from options (torch-free, so
the CLI builds what the ranks read without importing the runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from plait.errors import ConfigError
from plait.workloads.gnn.cost import LLCG_CORRECTIONS, LLCG_LOCAL_STEPS
from plait.workloads.gnn.model import GnnKind


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
    """Sampled data parallelism (:mod:`plait.workloads.gnn.worker`)."""

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
    """Partition-local training or LLCG (:mod:`plait.workloads.gnn.local_worker`)."""

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
    """Full-graph GraphSAGE through GNNPipe's layer pipeline (:mod:`plait.workloads.gnn.pipe_worker`)."""

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
