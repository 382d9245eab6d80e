"""How a GNN training script holds its graph and feeds its batches: facts of the script and its framework (not of the
graph, the model or the hardware) that the estimate charges (:func:`plait.workloads.gnn.cost.estimate_gnn`). A GNN
file states them in its optional ``[loop]`` table (:func:`plait.workloads.gnn.model.read_gnn`)::

    [loop]
    graph_formats = "coo"     # coo | csr,csc: the sparse formats a DGL script's graph holds (full-graph training)
    copy_from = "pinned"      # pinned | pageable: the training loop's copy of host-held rows (host_features)
    loader = ""               # a host-CPU loader of data/loaders.toml ("": the strategy samples in the loop)
    workers = 4               # the loader's sampling workers
    feature_bytes = 4         # bytes a stored input feature value (4: fp32; 2: fp16 rows cast on the GPU)
    ranks_per_node = 0        # training ranks sharing a node's host cores (0: as many as the cluster's node holds)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plait.errors import ConfigError

GraphFormats = Literal["coo", "csr,csc"]
GRAPH_FORMATS: tuple[GraphFormats, ...] = ("coo", "csr,csc")
CopyFrom = Literal["pinned", "pageable"]
COPY_FROM: tuple[CopyFrom, ...] = ("pinned", "pageable")
FEATURE_VALUE_BYTES = (1, 2, 4, 8)
"""Widths a stored feature value may have: int8/fp8, fp16/bf16, fp32, fp64."""
DEFAULT_WORKERS = 4
"""Assumed loader workers where a file states none: the ``num_workers=4`` of DGL's ``train_sampling.py`` and of the
measured runs ``data/loaders.toml`` derives its rates from."""


@dataclass(frozen=True, kw_only=True)
class GnnLoop:
    """The training loop around the model (module docstring); each default is stated as assumed."""

    graph_formats: GraphFormats = "coo"
    """The sparse formats a DGL script's graph holds: ``coo`` (assumed default: a graph built from an edge list keeps
    its COO, as ogb's ``DglNodePropPredDataset`` and DGL's datasets build it), whose full-graph backward rebuilds the
    reversed graph's CSC at every reversal (:mod:`plait.workloads.gnn.dgl_reverse`), or ``csr,csc``
    (``g.formats(['csr', 'csc'])``), which holds it. Read by full-graph training with the ``dgl`` and ``spmm``
    libraries."""
    copy_from: CopyFrom = "pinned"
    """Where the training loop copies the batch's host-held rows from (the ``host_features`` strategy without a
    loader): pinned memory, or a fresh pageable tensor (``feat[ids].to(device)``, DGL's examples'
    ``load_subtensor``: :mod:`plait.workloads.gnn.staging`). A host loader states its own (``data/loaders.toml``)."""
    loader: str = ""
    """A host-CPU loader of ``data/loaders.toml`` whose workers sample the batches beside the trainer
    (:mod:`plait.workloads.gnn.host`; strategies ``replicated``: rows gathered on the GPU, or ``host_features``: rows
    sliced in host memory and copied); empty: the strategy samples in the training loop."""
    workers: int = DEFAULT_WORKERS
    """The loader's sampling workers (at most the node's cores over its ranks are used)."""
    feature_bytes: int = 4
    """Bytes a stored input feature value takes in the loader's table (fp32; SALIENT stores fp16 rows, cast to fp32
    on the GPU). Read with a loader: the rows it copies, their cast, and the table and rows a GPU holds
    (:func:`plait.workloads.gnn.cost.feature_memory_bytes`)."""
    ranks_per_node: int = 0
    """Training ranks sharing one node's host cores and memory; 0: the world's ranks packed onto the cluster's
    nodes (``min(world, gpus_per_node)``)."""

    def __post_init__(self) -> None:
        """Refuse values no script has, in one line naming the value and the rule."""
        if self.graph_formats not in GRAPH_FORMATS:
            raise ConfigError(f"[loop] graph_formats={self.graph_formats!r} must be one of {', '.join(GRAPH_FORMATS)}")
        if self.copy_from not in COPY_FROM:
            raise ConfigError(f"[loop] copy_from={self.copy_from!r} must be one of {', '.join(COPY_FROM)}")
        if self.feature_bytes not in FEATURE_VALUE_BYTES:
            raise ConfigError(
                f"[loop] feature_bytes={self.feature_bytes} must be one of {', '.join(map(str, FEATURE_VALUE_BYTES))}"
            )
        if self.workers < 1:
            raise ConfigError(f"[loop] workers={self.workers} must be >= 1")
        if self.ranks_per_node < 0:
            raise ConfigError(f"[loop] ranks_per_node={self.ranks_per_node} must be >= 0 (0: the cluster's node)")
        if self.loader and self.copy_from != "pinned":
            raise ConfigError(
                f"[loop] copy_from={self.copy_from!r} is the loop's own copy; loader={self.loader!r} "
                "states its own (data/loaders.toml)"
            )
        if not self.loader and (self.feature_bytes != 4 or self.workers != DEFAULT_WORKERS):
            raise ConfigError(
                f"[loop] feature_bytes={self.feature_bytes} and workers={self.workers} are read only "
                "with a loader (loader is empty)"
            )

    def gpus_on_node(self, world: int, gpus_per_node: int) -> int:
        """Ranks sharing a node: :attr:`ranks_per_node`, or ``world`` packed onto nodes of ``gpus_per_node``; more
        ranks than the node's GPUs or the world's are refused (a rank is one GPU)."""
        if self.ranks_per_node > min(world, gpus_per_node):
            raise ConfigError(
                f"[loop] ranks_per_node={self.ranks_per_node} must be <= the {world} ranks and the "
                f"{gpus_per_node} GPUs of a node"
            )
        return self.ranks_per_node or min(world, gpus_per_node)


DEFAULT_LOOP = GnnLoop()
