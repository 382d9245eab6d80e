"""Per-tier compression across sites (:mod:`plait.sync.site_topk`, :mod:`plait.sync.site_quantize`): the ratio and
width FusionLLM's rule picks and the cost.

**The ratio** (:func:`adaptive_ratio`). FusionLLM's AdaTopK (Tang et al. 2024, arXiv 2410.12707, abstract and the
AdaTopK section) compresses only on the slowest links, with a top-k ratio set by the link's bandwidth relative to
the fast links, so that the slow link carries its share in about the time the fast ones carry theirs. Read here
as ``F = min(1, B_slow / B_fast)`` per GPU: ``B_slow`` the wide-area tier's bandwidth per GPU, ``B_fast`` that of the
tier below it (the site's own fabric), each from the cluster description with its source. The exact equation
could not be read from the copy of the paper available here (https://arxiv.org/html/2410.12707v1: its abstract
only, "an AdaTopK compressor to adaptively compress intermediate activations and gradients at the slowest
communication links"): this reading of the rule is assumed. It needs no time budget: the two tiers' bandwidths set it.

**The width** (:func:`adaptive_bits`) of ``site_quantize`` (:mod:`plait.sync.site_quantize`) by the same rule:
the cross-site bytes per element cut by the same factor, ``b >= 32 F``, rounded up to a width plait packs.

**The cost** (:func:`site_costs`), per step, all exposed (``plait run`` keeps one bucket, so it follows the
backward): inside a site of ``m`` replicas, a reduce-scatter and an all-gather of the fp32 buffer on the site's
tiers; across ``S`` sites, one ring all-gather per piece the method sends (``site_topk``: values and indices of
``4 k`` bytes each; ``site_quantize``: codes and the scale, or the fp32 shard at 32 bits) among the members at one
position (``m * stride`` ranks apart: the wide-area tier); the compressor's streaming passes over the shard
(:data:`plait.sync.sparse.TOPK_PASSES`, :meth:`plait.sync.SiteQuantize.cross_site_passes`). Memory: the
error-feedback residual (the whole buffer, for the runtime keeps it per parameter) and the shard's dense sum. On
rows whose replicas lie in one site: the plain all-reduce.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.sync.base import FP32_PASS_BYTES, GRAD_BYTES
from plait.sync.site_quantize import SITE_QUANTIZE_BITS, SiteQuantize
from plait.sync.site_topk import SiteTopK


def adaptive_ratio(cluster: Cluster) -> float | None:
    """FusionLLM's top-k ratio for the wide-area tier of ``cluster`` (``None``: no wide-area tier, nothing to
    compress): ``min(1, B_wide / B_below)``, per GPU (assumed reading, module docstring)."""
    tiers = cluster.tiers
    wide = next((i for i, t in enumerate(tiers) if t.wide_area), None)
    if wide is None or wide == 0:
        return None
    return min(1.0, tiers[wide].bandwidth_gb_per_s_per_gpu / tiers[wide - 1].bandwidth_gb_per_s_per_gpu)


def adaptive_bits(cluster: Cluster) -> int | None:
    """The cross-site width for ``site_quantize`` by the same rule on ``cluster`` (``None``: no wide-area tier):
    :func:`bits_for` of :func:`adaptive_ratio`."""
    ratio = adaptive_ratio(cluster)
    return None if ratio is None else bits_for(ratio)


def bits_for(ratio: float) -> int:
    """The fewest bits of :data:`plait.sync.site_quantize.SITE_QUANTIZE_BITS` at or above ``32 F``: the slow tier
    then carries a shard in no more time than the fabric below it carries it in fp32; 32 (exact) at ``F = 1``."""
    return next(b for b in SITE_QUANTIZE_BITS if b >= 32 * ratio - 1e-9)


def site_layout(cluster: Cluster, replicas: Any, stride: Any) -> tuple[Any, Any]:
    """(members per site, sites) of replica groups of ``replicas`` ranks ``stride`` apart, laid out in aligned
    blocks (:func:`plait.cost.egress.sites_spanned`, per row)."""
    site = cluster.site_gpus
    replicas, stride = np.asarray(replicas, dtype=np.int64), np.asarray(stride, dtype=np.int64)
    if site is None:
        return replicas, np.ones_like(replicas)
    per_site = np.maximum(1, site // stride)
    spans = (replicas > 1) & (stride * (replicas - 1) >= site)
    sites = np.where(spans, -(-replicas // per_site), 1)
    return replicas // sites, sites


def site_costs(cluster: Cluster, method: SiteTopK | SiteQuantize, cols: PlanColumns, elements: int,
               memory_bytes_per_s: float) -> tuple[Any, Any, Any]:
    """(overlapped s, exposed s, extra memory bytes) per row, for one rank holding ``elements`` gradient values:
    the site's reduce-scatter and all-gather, one ring all-gather across sites per piece of
    :meth:`~plait.sync.SiteTopK.cross_site_pieces`, the method's streaming passes over the shard."""
    replicas, stride = cols.dp, cols["tp"] * cols["cp"]
    members, sites = site_layout(cluster, replicas, stride)
    scalar = cols.xp.scalar
    members_b, sites_b = np.broadcast_arrays(members, sites)
    padded = -(-elements // members_b) * members_b
    shard = padded // members_b
    grad = float(elements * GRAD_BYTES)
    dense = collective_s(cluster, "all_reduce", replicas, stride, cols.full(grad))
    inside = (collective_s(cluster, "reduce_scatter", members_b, stride, padded * float(GRAD_BYTES))
              + collective_s(cluster, "all_gather", members_b, stride, padded * float(GRAD_BYTES)))
    across = 0.0
    for piece in range(len(method.cross_site_pieces(1))):
        sent = np.vectorize(lambda s, i=piece: method.cross_site_pieces(int(s))[i], otypes=[float])(shard) \
            if shard.size else shard.astype(float)
        across = across + collective_s(cluster, "all_gather", sites_b, members_b * stride, sites_b * sent)
    passes = np.vectorize(method.cross_site_passes, otypes=[float])(sites_b) if sites_b.size else sites_b
    streamed = passes * shard * FP32_PASS_BYTES / memory_bytes_per_s
    split = sites_b > 1
    exposed = np.where(split, inside + across + streamed, dense)
    memory = np.where(split, (elements + shard) * float(FP32_PASS_BYTES), 0.0)
    if scalar:
        return 0.0, float(np.ravel(exposed)[0]), float(np.ravel(memory)[0])
    return cols.zeros(), exposed, memory


site_topk_costs = site_costs
"""The name tests and callers of ``site_topk`` use."""
