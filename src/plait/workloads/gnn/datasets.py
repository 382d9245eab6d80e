"""The public graphs plait knows: their statistics (``data/graphs.toml``) and, where measured, their degree histograms
(``data/degree_histograms.toml``), symmetrized or in their raw direction."""

from __future__ import annotations

import functools
import math
import tomllib
from importlib import resources

from plait.workloads.gnn.model import GraphStats

ASSUMED_EXPONENT = 2.1
"""Assumed degree-law exponent where a dataset states none (graphs.toml)."""


def _data(name: str) -> dict:
    return tomllib.loads(resources.files("plait.workloads.gnn").joinpath(f"data/{name}").read_text())


def graphs(directed: bool = False) -> dict[str, GraphStats]:
    """The datasets of graphs.toml, symmetrized, with the measured degree histograms of degree_histograms.toml where
    there is one; ``directed``: those with raw directed edges in their direction (the power laws: no histogram gives
    in- and out-degrees apart)."""
    measured = _data("degree_histograms.toml")
    out = {}
    for name, g in _data("graphs.toml").items():
        raw = directed and "raw_out_degree_exponent" in g
        mean = (1 if raw else 2) * g["edges"] / g["nodes"]
        hist = (
            ()
            if raw or name not in measured
            else tuple(zip(measured[name]["degrees"], measured[name]["nodes"], strict=True))
        )
        out[name] = GraphStats(
            nodes=g["nodes"],
            edges=g["edges"],
            features=g["features"],
            classes=g["classes"],
            train_nodes=g["train_nodes"],
            degree_exponent=g.get("degree_exponent", ASSUMED_EXPONENT),
            max_degree=_max_degree(g, hist, raw, mean),
            out_degree_exponent=g["raw_out_degree_exponent"] if raw else 0.0,
            degree_histogram=hist,
        )
    return out


def _max_degree(g: dict, hist: tuple, raw: bool, mean: float) -> int:
    """The largest degree: a measured histogram's, else the one the dataset's page states (``raw_max_out_degree`` for
    the raw direction, whose draws land by out-degree; ``max_degree`` symmetrized), else 100 x the mean (assumed,
    graphs.toml)."""
    if hist:
        return math.ceil(hist[-1][0])
    stated = g.get("raw_max_out_degree" if raw else "max_degree")
    return int(stated) if stated else min(g["nodes"] - 1, round(100 * mean))


@functools.cache
def known_graphs() -> dict[str, GraphStats]:
    """:func:`graphs` read once (symmetrized): the datasets a loader's reference run names
    (:func:`plait.workloads.gnn.host.loader_rates`). Read only: the same dict serves every caller."""
    return graphs()
