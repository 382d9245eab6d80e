"""A recommendation model with embedding tables (DLRM: Naumov et al., arXiv 1906.00091, Sec. 2-3): sparse
features looked up in tables and pooled (summed), dense features through a bottom MLP, their pairwise dot
products (the interaction) through a top MLP.

A TOML file describes it (``examples/dlrm-small.toml``)::

    name = "..."
    dense_features = 13
    bottom_mlp = [512, 256, 64]      # widths; the last equals every table's dimension
    top_mlp = [512, 256, 1]
    [[tables]]
    name = "t0"
    rows = 1000000
    dim = 64
    pooling = 1.0                     # ids per sample (the pooling factor)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from plait.errors import ConfigError
from plait.schema import build
from plait.workload.files import read_toml

ELEMENT_BYTES = {"fp32": 4, "fp16": 2}


@dataclass(frozen=True)
class Table:
    """One embedding table and the sparse feature looked up in it."""

    name: str
    """The sparse feature's (and the table's) name."""
    rows: int
    """Rows (ids)."""
    dim: int
    """Embedding width; equals the bottom MLP's output."""
    pooling: float = 1.0
    """Mean ids per sample (TorchRec's pooling factor)."""
    dtype: str = "fp32"
    """Weights' type (:data:`ELEMENT_BYTES`)."""

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def bytes(self) -> int:
        """The table's weights."""
        return self.rows * self.dim * self.element_bytes


@dataclass(frozen=True)
class DlrmSpec:
    """A DLRM (module docstring)."""

    name: str
    """What tables call it (a file's ``name``, else the file's stem)."""
    dense_features: int
    """Dense input features."""
    bottom_mlp: tuple[int, ...]
    """The bottom MLP's widths; the last equals every table's dimension."""
    top_mlp: tuple[int, ...]
    """The top MLP's widths; the last is 1 (the click logit)."""
    tables: tuple[Table, ...]
    """The embedding tables."""

    def mlp_params(self) -> int:
        """Parameters of the bottom and top MLPs (weights and biases)."""
        out = 0
        widths = (self.dense_features, *self.bottom_mlp)
        out += sum(a * b + b for a, b in itertools.pairwise(widths))
        top = (self.interaction_width(), *self.top_mlp)
        return out + sum(a * b + b for a, b in itertools.pairwise(top))

    def interaction_width(self) -> int:
        """The top MLP's input: the bottom MLP's output and the dot product of every pair of the ``T + 1`` vectors
        (Naumov et al. 2019, Sec. 3: the strictly lower triangle of their Gram matrix)."""
        vectors = len(self.tables) + 1
        return self.bottom_mlp[-1] + vectors * (vectors - 1) // 2

    def mlp_flops_per_sample(self) -> float:
        """Forward FLOPs of both MLPs and the interaction for one sample (2 per multiply-add)."""
        widths = (self.dense_features, *self.bottom_mlp)
        flops = sum(2.0 * a * b for a, b in itertools.pairwise(widths))
        top = (self.interaction_width(), *self.top_mlp)
        flops += sum(2.0 * a * b for a, b in itertools.pairwise(top))
        vectors = len(self.tables) + 1
        return flops + 2.0 * vectors * vectors * self.bottom_mlp[-1]


def read_dlrm(path: Path) -> DlrmSpec:
    """The DLRM a TOML file describes, through the strict schema (:func:`plait.schema.build`: unknown keys, missing
    keys and wrong types are errors naming the key); one-line errors name the value and the rule."""
    data = read_toml(path)
    spec = build(DlrmSpec, {"name": path.stem, **data}, str(path))
    check_dlrm(spec, str(path))
    return spec


def check_dlrm(spec: DlrmSpec, where: str) -> None:
    """Refuse what no DLRM can be."""
    if not spec.tables:
        raise ConfigError(f"{where}: a DLRM needs at least one table")
    if not spec.bottom_mlp or not spec.top_mlp:
        raise ConfigError(f"{where}: bottom_mlp and top_mlp must each list at least one width")
    for t in spec.tables:
        if t.rows <= 0 or t.dim <= 0 or not math.isfinite(t.pooling) or t.pooling <= 0:
            raise ConfigError(f"{where}: table {t.name} rows={t.rows}, dim={t.dim}, pooling={t.pooling} must be > 0")
        if t.dtype not in ELEMENT_BYTES:
            raise ConfigError(f"{where}: table {t.name} dtype={t.dtype!r} must be one of {', '.join(ELEMENT_BYTES)}")
        if t.dim != spec.bottom_mlp[-1]:
            raise ConfigError(f"{where}: table {t.name} dim={t.dim} must equal the bottom MLP's output "
                              f"{spec.bottom_mlp[-1]} (the interaction takes dot products)")
    if spec.top_mlp[-1] != 1:
        raise ConfigError(f"{where}: top_mlp must end in 1 (the click logit), got {spec.top_mlp[-1]}")
