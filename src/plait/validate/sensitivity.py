"""What a row's prediction owes to one efficiency curve: the cluster with that curve scaled (the row diagnostics of
``benchmarks/long_seq_rows.py`` and ``benchmarks/llmfoundry_rows.py`` halve one and read how the step grows)."""

from __future__ import annotations

import dataclasses

from plait.hardware.cluster import Cluster


def with_curve_scaled(cluster: Cluster, curve_name: str, factor: float) -> Cluster:
    """``cluster`` with its accelerator's ``curve_name`` efficiency (``matmul_bf16``, ``attention``, ...) at
    ``factor`` times its fractions: a what-if, never a prediction."""
    acc = cluster.accelerator
    curve = getattr(acc.efficiency, curve_name)
    scaled = dataclasses.replace(curve, value=curve.value * factor, fractions=tuple(f * factor for f in curve.fractions))
    efficiency = dataclasses.replace(acc.efficiency, **{curve_name: scaled})
    return dataclasses.replace(cluster, accelerator=dataclasses.replace(acc, efficiency=efficiency))
