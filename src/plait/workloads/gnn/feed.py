"""What the training loop around the model adds to a mini-batch step (:class:`plait.workloads.gnn.loop.GnnLoop`):

- a loop that copies host-held rows from a fresh pageable tensor (``copy_from = "pageable"``, strategy
  ``host_features``): the pages faulted in and the copy staged through one core (:mod:`plait.workloads.gnn.staging`);
- a host-CPU loader (``loader``): its workers sample (and may slice) beside the trainer, the loop copies the batch
  (:mod:`plait.workloads.gnn.host`); the trainer's own step is the device's work, the gradient all-reduce, the
  optimizer and what it does with the batch's input rows on the GPU (:func:`rows_on_gpu_s`), or the host's dispatch
  where that is longer.
"""

from __future__ import annotations

from dataclasses import replace

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.gnn.compute import input_cast_s
from plait.workloads.gnn.datasets import known_graphs
from plait.workloads.gnn.dgl_reverse import REVERSING_LIBRARIES
from plait.workloads.gnn.host import HostLoader, host_step, loader_rates, loaders, usable_workers
from plait.workloads.gnn.model import FEATURE_BYTES, GnnSpec
from plait.workloads.gnn.staging import loop_threads, pageable_extra_s
from plait.workloads.gnn.step import GnnEstimate

LOADER_STRATEGIES = ("replicated", "host_features")
"""Where a host loader's batch rows come from: the GPU's own table (gathered there), or host memory (sliced, copied)."""


def loop_gpus_on_node(spec: GnnSpec, cluster: Cluster, world: int) -> int:
    """Ranks sharing the node's host cores (:meth:`plait.workloads.gnn.loop.GnnLoop.gpus_on_node`)."""
    return spec.loop.gpus_on_node(world, cluster.gpus_per_node)


def pageable_fetch_s(est: GnnEstimate, spec: GnnSpec, cluster: Cluster, world: int) -> float:
    """The host-features fetch of ``est``, plus what a pageable copy adds where the loop copies from one."""
    if spec.loop.copy_from != "pageable" or est.strategy != "host_features" or spec.loop.loader:
        return est.fetch_s
    threads = loop_threads(cluster, loop_gpus_on_node(spec, cluster, world))
    return est.fetch_s + pageable_extra_s(est.fetch_bytes, cluster, threads)


def named_loader(name: str) -> HostLoader:
    """The loader of ``data/loaders.toml`` called ``name``."""
    known = loaders()
    if name not in known:
        raise ConfigError(f"[loop] loader={name!r} must be one of {', '.join(known)}")
    return known[name]


def resolve_library(spec: GnnSpec, library: str) -> str:
    """The library a job is costed with: ``library`` (empty: PyG's), or with a loader the loader's own
    (:attr:`plait.workloads.gnn.host.HostLoader.library`: whose sampler it is), which ``library`` may only repeat."""
    if not spec.loop.loader:
        return library or "pyg"
    own = named_loader(spec.loop.loader).library
    if library and library != own:
        raise ConfigError(f"library={library!r}: loader {spec.loop.loader} samples and trains as {own!r}")
    return own


def host_loader(spec: GnnSpec, strategy: str, library: str, cache_fraction: float, matrix_sampler: bool) -> HostLoader:
    """The loader ``spec.loop`` names, refusing options it does not read."""
    loader, name = named_loader(spec.loop.loader), spec.loop.loader
    if strategy not in LOADER_STRATEGIES:
        raise ConfigError(f"loader {name} feeds the {' or '.join(LOADER_STRATEGIES)} strategies, not {strategy}")
    if library != loader.library:
        raise ConfigError(f"library={library!r}: loader {name} samples and trains as {loader.library!r}")
    if cache_fraction or matrix_sampler:
        raise ConfigError(
            f"loader {name} slices every row itself: cache_fraction={cache_fraction} and a matrix "
            "sampler are not modelled with it"
        )
    return loader


def rows_on_gpu_s(est: GnnEstimate, spec: GnnSpec, cluster: Cluster) -> float:
    """What a host loader's trainer does on the GPU with the batch's input rows: gathers them from the table it holds
    (``replicated``: ``nfeat[input_nodes]`` on the GPU, the estimate's ``fetch_s``, which reads and writes fp32 rows,
    at the table's stored width), then, as with rows the loop or the loader sliced on the host (they arrive
    gathered), casts rows stored below fp32 (SALIENT's fp16 rows: ``x = x.to(torch.float)`` opens the SAGE, GAT and
    GIN ``forward`` of its ``driver/models.py``)."""
    assert est.batch is not None  # a mini-batch strategy (host_loader refused the others)
    width = spec.loop.feature_bytes
    gather_s = est.fetch_s * width / FEATURE_BYTES if est.strategy == "replicated" else 0.0
    return gather_s + input_cast_s(est.batch.nodes, spec.graph.features, width, cluster.accelerator)


def loader_estimate(est: GnnEstimate, spec: GnnSpec, cluster: Cluster, world: int, loader: HostLoader) -> GnnEstimate:
    """``est`` (the trainer's step) fed by ``loader`` (module docstring): its step and epoch become the loader's;
    its sampling and fetch show the loader's sampling and its slicing, copy and rows on the GPU."""
    assert est.batch is not None and est.strategy in LOADER_STRATEGIES  # host_loader refused the others
    per_node = loop_gpus_on_node(spec, cluster, world)
    rows_s = rows_on_gpu_s(est, spec, cluster)
    trainer_s = max(est.compute_s + est.all_reduce_s + est.optimizer_s + rows_s, est.host_s)
    workers = usable_workers(spec.loop.workers, cluster, per_node)
    step = host_step(
        est.batch,
        loader,
        loader_rates(loader, known_graphs()),
        workers,
        cluster,
        spec.graph.features,
        spec.loop.feature_bytes,
        trainer_s,
        loop_threads(cluster, per_node, workers),
        gpus_on_node=per_node,
    )
    if est.strategy == "replicated":  # the rows never leave the GPU
        step = replace(step, slicing_s=0.0, transfer_s=0.0)
    return replace(est, sampling_s=step.sampling_s, fetch_s=rows_s + step.slicing_s + step.transfer_s, feed=step)


def loop_notes(spec: GnnSpec, strategy: str, library: str) -> tuple[str, ...]:
    """The ``[loop]`` options ``strategy`` with ``library`` does not read, each said in one line (STYLE.md rule 11:
    an option with no effect is said, not refused, so that one spec serves every strategy ``plait plan`` tries)."""
    loop, notes = spec.loop, []
    copies = strategy == "host_features" and not loop.loader
    if loop.copy_from != "pinned" and not copies:
        notes.append(
            f"[loop] copy_from={loop.copy_from!r} has no effect with {strategy}: only the host_features "
            "strategy's loop copies host-held rows"
        )
    if loop.graph_formats != "coo" and not (strategy == "full_graph" and library in REVERSING_LIBRARIES):
        notes.append(
            f"[loop] graph_formats={loop.graph_formats!r} has no effect with {strategy} and {library}: "
            f"read by full_graph with {' or '.join(REVERSING_LIBRARIES)}"
        )
    if loop.ranks_per_node and not (loop.loader or (copies and loop.copy_from == "pageable")):
        notes.append(
            f"[loop] ranks_per_node={loop.ranks_per_node} has no effect with {strategy}: read by a loader "
            "or a pageable copy"
        )
    return tuple(notes)
