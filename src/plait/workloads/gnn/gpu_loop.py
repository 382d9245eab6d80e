"""The host's per-hop work in DGL's GPU-sampling loop (``NodeDataLoader`` over a graph on the GPU, no workers):
each hop's ``sample_neighbors`` and ``to_block`` read their output sizes back to the host before the next can be
launched, and DGL builds each block as a Python graph object, so the host's work per hop runs between the device's
and adds to the step. plait counts the sampling kernels (:mod:`plait.workloads.gnn.sampler`) but not this work;
its size per hop is derived from a published DGL epoch (``data/gpu_loop.toml``): the measured epoch minus plait's
prediction of the same run, over its steps and hops. It therefore also holds whatever else plait misses on that run
(a residual of one external measurement, not of a validation row).
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.model import GnnModel, GnnSpec, GraphStats


@functools.cache
def _reference() -> dict:
    return tomllib.loads(resources.files("plait.workloads.gnn").joinpath("data/gpu_loop.toml").read_text())["reference"]


def dgl_gpu_hop_s(graphs: dict[str, GraphStats]) -> float:
    """Seconds of host work per sampled hop of DGL's GPU-sampling loop (module docstring), never below zero."""
    ref = _reference()
    if ref["dataset"] not in graphs:
        raise ConfigError(f"gpu_loop.toml: reference dataset {ref['dataset']!r} has no statistics")
    fanouts = tuple(ref["fanouts"])
    spec = GnnSpec(name=ref["dataset"], graph=graphs[ref["dataset"]],
                   model=GnnModel(kind=ref["model"], layers=ref["layers"], hidden=ref["hidden"], fanouts=fanouts))
    est = estimate_gnn(spec, get_cluster(ref["cluster"]), 1, ref["batch"], "replicated", library="dgl")
    return max(0.0, (ref["epoch_s"] - est.epoch_s) / (est.steps_per_epoch * len(fanouts)))
