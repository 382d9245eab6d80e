"""A recommendation model with embedding tables (DLRM: Naumov et al., arXiv 1906.00091, Sec. 2-3): sparse
features looked up in tables and pooled (summed or averaged over the ids of a sample: multi-hot), dense features
through a bottom MLP, their interaction through a top MLP. Two interactions (``interaction``), as DLRM's reference
code's ``--arch-interaction-op`` (facebookresearch/dlrm dlrm_s_pytorch.py ``interact_features``):

- ``dot``: the pairwise dot products of the bottom MLP's output and the pooled embeddings, beside the bottom MLP's
  output; every table's width must equal the bottom MLP's output;
- ``cat``: the bottom MLP's output and the pooled embeddings concatenated; tables may have any width.

``architecture = "wide_deep"`` is Wide & Deep (Cheng et al., arXiv 1606.07792, Sec. 3): the deep part is the ``cat``
model above (the paper concatenates embeddings and dense features into a feed-forward network; an empty
``bottom_mlp`` passes the dense features through as they are), the wide part a linear model over sparse features:
tables with ``part = "wide"`` and ``dim = 1``, each id's weight summed per sample (a generalized linear model over
one-hot or crossed features, ``y = w^T x``: Sec. 3.1), added to the deep part's logit (their joint training:
Sec. 3.3, Eq. 3). Each table looks up its own sparse feature (a wide table's ids are a crossed feature's hashed ids).

A TOML file describes it (``examples/dlrm-small.toml``)::

    name = "..."
    dense_features = 13
    bottom_mlp = [512, 256, 64]      # widths; under dot the last equals every table's dimension
    top_mlp = [512, 256, 1]
    [[tables]]
    name = "t0"
    rows = 1000000
    dim = 64
    pooling = 1.0                     # ids per sample (the pooling factor)
    pooling_mode = "sum"              # or "mean"

``interaction = "cat"`` (default ``"dot"``), ``architecture = "wide_deep"`` (default ``"dlrm"``) and a table's
``part = "wide"`` (default ``"deep"``) choose the variants above (``examples/dlrm-cat.toml``,
``examples/wide-deep-tiny.toml``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
    pooling_mode: Literal["sum", "mean"] = "sum"
    """How a sample's ids' rows are pooled (TorchRec's ``PoolingType``; the same bytes either way)."""
    part: Literal["deep", "wide"] = "deep"
    """``wide``: a weight per id (``dim = 1``) summed into the logit (Wide & Deep only, module docstring)."""

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
    """The bottom MLP's widths; under ``dot`` the last equals every deep table's dimension; ``cat`` may list none."""
    top_mlp: tuple[int, ...]
    """The top MLP's widths; the last is 1 (the click logit)."""
    tables: tuple[Table, ...]
    """The embedding tables."""
    interaction: Literal["dot", "cat"] = "dot"
    """How the bottom MLP's output and the pooled embeddings meet (module docstring)."""
    architecture: Literal["dlrm", "wide_deep"] = "dlrm"
    """``wide_deep``: the wide tables' sum added to the logit (module docstring)."""

    @property
    def deep_tables(self) -> tuple[Table, ...]:
        """The tables whose pooled embeddings enter the interaction."""
        return tuple(t for t in self.tables if t.part == "deep")

    @property
    def dense_width(self) -> int:
        """The bottom MLP's output (the dense features themselves when it has no layer)."""
        return self.bottom_mlp[-1] if self.bottom_mlp else self.dense_features

    def mlp_params(self) -> int:
        """Parameters of the bottom and top MLPs (weights and biases)."""
        widths = (self.dense_features, *self.bottom_mlp)
        return sum(a * b + b for a, b in itertools.pairwise(widths)) + self.top_mlp_params()

    def top_mlp_params(self) -> int:
        """Parameters of the top MLP (weights and biases), whose input is the interaction's output."""
        top = (self.interaction_width(), *self.top_mlp)
        return sum(a * b + b for a, b in itertools.pairwise(top))

    def interaction_width(self) -> int:
        """The top MLP's input. ``dot``: the bottom MLP's output ``d`` and the dot product of every pair of the
        ``T + 1`` vectors, ``d + T (T + 1) / 2`` (Naumov et al. 2019, Sec. 3: the strictly lower triangle of their
        Gram matrix; dlrm_s_pytorch.py ``num_int = num_fea (num_fea - 1) / 2 + m_den_out``). ``cat``: ``d`` plus
        every deep table's width (dlrm_s_pytorch.py ``num_int = num_fea * m_den_out`` for equal widths)."""
        deep = self.deep_tables
        if self.interaction == "cat":
            return self.dense_width + sum(t.dim for t in deep)
        vectors = len(deep) + 1
        return self.dense_width + vectors * (vectors - 1) // 2

    def mlp_flops_per_sample(self) -> float:
        """Forward FLOPs of both MLPs and the interaction for one sample (2 per multiply-add). ``dot``: the batched
        Gram matrix of the ``T + 1`` vectors of width ``d``, ``2 (T + 1)^2 d`` (dlrm_s_pytorch.py computes all of
        it, ``torch.bmm(T, T^T)``, then keeps the lower triangle); ``cat`` copies (no FLOPs). Wide & Deep adds its
        wide tables' pooled weights to the logit: one add each."""
        widths = (self.dense_features, *self.bottom_mlp)
        flops = sum(2.0 * a * b for a, b in itertools.pairwise(widths))
        top = (self.interaction_width(), *self.top_mlp)
        flops += sum(2.0 * a * b for a, b in itertools.pairwise(top))
        flops += len(self.tables) - len(self.deep_tables)
        if self.interaction == "cat":
            return flops
        vectors = len(self.deep_tables) + 1
        return flops + 2.0 * vectors * vectors * self.dense_width


def read_dlrm(path: Path) -> DlrmSpec:
    """The DLRM a TOML file describes, through the strict schema (:func:`plait.schema.build`: unknown keys, missing
    keys and wrong types are errors naming the key); one-line errors name the value and the rule."""
    data = read_toml(path)
    spec = build(DlrmSpec, {"name": path.stem, **data}, str(path))
    check_dlrm(spec, str(path))
    return spec


def check_dlrm(spec: DlrmSpec, where: str) -> None:
    """Refuse what no DLRM (or Wide & Deep) can be."""
    if not spec.deep_tables:
        raise ConfigError(f"{where}: a recommendation model needs at least one deep table")
    if spec.architecture == "wide_deep" and (spec.interaction != "cat" or len(spec.deep_tables) == len(spec.tables)):
        raise ConfigError(f"{where}: architecture \"wide_deep\" takes interaction \"cat\" (the deep part "
                          f"concatenates) and at least one part=\"wide\" table, got interaction={spec.interaction!r}")
    if not spec.top_mlp or (not spec.bottom_mlp and spec.interaction == "dot"):
        raise ConfigError(f"{where}: top_mlp must list at least one width, and bottom_mlp too with interaction "
                          "\"dot\" (only \"cat\" takes the dense features as they are)")
    if len({t.name for t in spec.tables}) != len(spec.tables):
        raise ConfigError(f"{where}: table names must be distinct")
    for t in spec.tables:
        if t.rows <= 0 or t.dim <= 0 or not math.isfinite(t.pooling) or t.pooling <= 0:
            raise ConfigError(f"{where}: table {t.name} rows={t.rows}, dim={t.dim}, pooling={t.pooling} must be > 0")
        if t.dtype not in ELEMENT_BYTES:
            raise ConfigError(f"{where}: table {t.name} dtype={t.dtype!r} must be one of {', '.join(ELEMENT_BYTES)}")
        if t.part == "wide" and (spec.architecture != "wide_deep" or t.dim != 1):
            raise ConfigError(f"{where}: table {t.name} part=\"wide\" needs architecture=\"wide_deep\" and dim=1 "
                              f"(a weight per id), got architecture={spec.architecture!r}, dim={t.dim}")
        if t.part == "deep" and spec.interaction == "dot" and t.dim != spec.dense_width:
            raise ConfigError(f"{where}: table {t.name} dim={t.dim} must equal the bottom MLP's output "
                              f"{spec.dense_width} with interaction \"dot\" (dot products; \"cat\" takes any width)")
    if spec.top_mlp[-1] != 1:
        raise ConfigError(f"{where}: top_mlp must end in 1 (the click logit), got {spec.top_mlp[-1]}")
