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
import tomllib
from dataclasses import dataclass
from pathlib import Path

from plait.errors import ConfigError

ELEMENT_BYTES = {"fp32": 4, "fp16": 2}


@dataclass(frozen=True)
class Table:
    """One embedding table and the sparse feature looked up in it."""

    name: str
    rows: int
    dim: int
    pooling: float
    """Mean ids per sample (TorchRec's pooling factor)."""
    dtype: str = "fp32"

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
    dense_features: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    tables: tuple[Table, ...]

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
    """The DLRM a TOML file describes; one-line errors name the value and the rule."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
    try:
        tables = tuple(Table(str(t["name"]), int(t["rows"]), int(t["dim"]), float(t.get("pooling", 1.0)),
                             str(t.get("dtype", "fp32"))) for t in data["tables"])
        spec = DlrmSpec(str(data.get("name", path.stem)), int(data["dense_features"]),
                        tuple(int(x) for x in data["bottom_mlp"]), tuple(int(x) for x in data["top_mlp"]), tables)
    except KeyError as missing:
        raise ConfigError(f"{path}: a DLRM needs {missing.args[0]!r}") from None
    check_dlrm(spec, str(path))
    return spec


def check_dlrm(spec: DlrmSpec, where: str) -> None:
    """Refuse what no DLRM can be."""
    if not spec.tables:
        raise ConfigError(f"{where}: a DLRM needs at least one table")
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
