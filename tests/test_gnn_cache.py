"""A degree-ordered feature cache (PaGraph, GNNLab) on sampled GNN batches: its hit rate follows from the degree
distribution and the batch's skew towards high degrees, not from the cached share of nodes."""

from __future__ import annotations

import pytest

from plait.hardware.catalog import get_cluster
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.model import GnnModel, GnnSpec
from plait.workloads.gnn.sampling import degree_classes, sample_batch
from plait.workloads.gnn.validate import graphs

FANOUTS = (15, 10, 5)


def _hit(dataset: str, fraction: float) -> float:
    classes = degree_classes(graphs()[dataset])
    return sample_batch(classes, FANOUTS, 1024, 1, 0.0, fraction, redraw=True).cache_hit_rate


@pytest.mark.parametrize("dataset", ["ogbn-products", "ogbn-papers100M"])
def test_a_degree_ordered_cache_serves_more_than_its_share(dataset: str) -> None:
    """A neighbour is reached with a probability that grows with its degree, so caching the top 10% of nodes by
    degree serves more than 10% of a batch's feature reads; nothing cached serves nothing, everything all."""
    assert _hit(dataset, 0.0) == 0.0
    assert _hit(dataset, 1.0) == pytest.approx(1.0)
    assert _hit(dataset, 0.1) > 0.1


@pytest.mark.parametrize("low, high", [(0.01, 0.05), (0.05, 0.2), (0.2, 0.5)])
def test_a_larger_cache_hits_more_but_with_diminishing_returns(low: float, high: float) -> None:
    lo, hi = _hit("ogbn-products", low), _hit("ogbn-products", high)
    assert lo < hi and hi / lo < high / low


def test_host_features_fetch_only_the_caches_misses() -> None:
    """With features in host memory and a GPU cache of the highest degrees (PaGraph), the bytes read over PCIe are
    the batch's features times the miss rate."""
    spec = GnnSpec(name="p", graph=graphs()["ogbn-products"],
                   model=GnnModel(kind="sage", layers=3, hidden=256, fanouts=FANOUTS))
    cluster = get_cluster("dgx1-v100")
    plain = estimate_gnn(spec, cluster, 1, 1024, "host_features", library="dgl")
    cached = estimate_gnn(spec, cluster, 1, 1024, "host_features", cache_fraction=0.2, library="dgl")
    assert cached.batch is not None
    assert cached.fetch_bytes == pytest.approx(plain.fetch_bytes * (1.0 - cached.batch.cache_hit_rate))
    assert cached.memory_bytes > plain.memory_bytes
