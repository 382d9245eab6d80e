"""GNNLab's factored design: ``S`` of a node's GPUs only sample, the other ``T`` only train (Yang et al., *GNNLab: A
Factored System for Sample-based GNN Training over GPUs*, EuroSys 2022, Sec. 3-4).

- A **sampler** GPU holds the graph's structure and samples one batch at a time on the GPU
  (:func:`plait.workloads.gnn.sampler.sampling_time_s`), then hands the batch's blocks to a trainer through host
  memory: each sampled edge's two int32 ends out over its PCIe link and into the trainer's (GNNLab's global queue);
- a **trainer** GPU holds a feature cache of the nodes GNNLab's pre-sampling ranks first (Sec. 5), reads the cached
  rows from its memory and the rest from host memory over PCIe (gathered there at its share of the host's bandwidth),
  then trains: forward, backward, the gradient all-reduce among the ``T`` trainers, Adam. The cache's hit rate is
  the one GNNLab published for the dataset, model and cache size (:mod:`plait.workloads.gnn.presampling`), else a
  degree-ordered cache's (:attr:`plait.workloads.gnn.sampling.SampledBatch.cache_hit_rate`, a lower bound: GNNLab
  reports its pre-sampling policy at 90-99% of the optimal hit rate, abstract);
- samplers and trainers run asynchronously through the queue (Sec. 4), so an epoch of ``n`` batches takes the slower
  of ``ceil(n / S)`` sampler batches and ``ceil(n / T)`` trainer steps, after the first batch is sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.model import FEATURE_BYTES, GnnSpec
from plait.workloads.gnn.presampling import presampled_hit_rate
from plait.workloads.gnn.sampler import LOOP

QUEUE_INDEX_BYTES = 4
"""int32 node ids of the sampled blocks GNNLab's samplers queue (its ``IdType``)."""


@dataclass(frozen=True, kw_only=True)
class FactoredEpoch:
    """One epoch of a factored run, in seconds."""

    sample_s: float
    """One batch on one sampler GPU: sampling and handing its blocks over."""
    train_s: float
    """One step on one trainer GPU: feature extraction, forward, backward, all-reduce, optimizer."""
    batches: int
    samplers: int
    trainers: int
    cache_hit_rate: float

    @property
    def epoch_s(self) -> float:
        """The slower of the two pools over the epoch's batches, after the first batch's sampling."""
        sampler_pool = -(-self.batches // self.samplers) * self.sample_s
        trainer_pool = self.sample_s + -(-self.batches // self.trainers) * self.train_s
        return max(sampler_pool + self.train_s, trainer_pool)


def factored_epoch(spec: GnnSpec, cluster: Cluster, samplers: int, batch: int, cache_fraction: float,
                   feature_bytes: int = FEATURE_BYTES) -> FactoredEpoch:
    """The epoch of ``samplers`` sampler GPUs and the rest of one node's GPUs training (module docstring)."""
    trainers = cluster.gpus_per_node - samplers
    if samplers < 1 or trainers < 1:
        raise ConfigError(f"sampler_gpus={samplers} must leave at least one of the node's {cluster.gpus_per_node} "
                          "GPUs to train, and be >= 1")
    published = presampled_hit_rate(spec, batch, cache_fraction)
    est = estimate_gnn(spec, cluster, trainers, batch, "host_features", cache_fraction=cache_fraction,
                       library="dgl", sampler=LOOP, cache_hit_rate=published)
    sampled = est.batch
    assert sampled is not None
    pcie = cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9
    handover_s = sampled.sampled_edges * 2 * QUEUE_INDEX_BYTES / pcie
    scale = feature_bytes / FEATURE_BYTES  # the fetch was costed for fp32 features
    train_s = max(est.fetch_s * scale + est.compute_s + est.all_reduce_s + est.optimizer_s, est.host_s) + handover_s
    batches = -(-spec.graph.train_nodes // batch)
    return FactoredEpoch(sample_s=est.sampling_s + handover_s, train_s=train_s, batches=batches, samplers=samplers,
                         trainers=trainers,
                         cache_hit_rate=sampled.cache_hit_rate if published is None else published)
