"""A generalized linear model's description (``[glm]`` in a TOML), read strictly.

A GLM predicts ``f(x . w)`` from a sample's features ``x`` and one weight per feature ``w``; training minimises the
mean of a loss of ``x . w`` and the label plus ``l2 / 2 |w|^2``. The losses are those P4SGD names (Huang et al.,
arXiv 2305.05885, abstract and introduction: linear regression, classification, support vector machines):
``squared`` ``(z - y)^2 / 2``, ``logistic`` ``log(1 + exp(-y z))``, ``hinge`` ``max(0, 1 - y z)`` (labels ``y`` in
{-1, 1} for the last two).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from plait.errors import ConfigError
from plait.schema import build, check_keys, table
from plait.workload.files import read_toml

Loss = Literal["squared", "logistic", "hinge"]
"""The loss of ``z = x . w`` against the label (module docstring)."""


@dataclass(frozen=True, kw_only=True)
class GlmSpec:
    """One GLM training job: the data's shape, the loss and the mini-batch."""

    name: str
    """Display name."""
    loss: Loss
    """The loss (module docstring)."""
    samples: int
    """Training examples ``N``."""
    features: int
    """Features per example ``D`` (the model has one weight per feature)."""
    batch: int
    """Examples per mini-batch step (the whole group's, not one rank's)."""
    density: float = 1.0
    """Fraction of the features an example holds (1: dense rows; below 1: rows stored sparse, as values and
    column indices, CSR)."""
    value_bytes: int = 4
    """Bytes of one stored feature value and of one weight (fp32)."""
    index_bytes: int = 4
    """Bytes of one stored column index of a sparse row (int32)."""
    learning_rate: float = 0.1
    """SGD's step size (``plait run``)."""
    l2: float = 0.0
    """The L2 regularisation ``lambda`` (``l2 / 2 |w|^2``; coordinate descent needs > 0 or features of nonzero
    norm)."""

    @property
    def nonzeros_per_sample(self) -> float:
        """Stored features of one example: ``D x density``."""
        return self.features * self.density

    @property
    def sparse(self) -> bool:
        """Rows are stored as values and indices (density below 1)."""
        return self.density < 1.0

    def row_bytes(self, features: float) -> float:
        """Bytes of one example's slice of ``features`` columns as stored (dense values, or CSR values and
        indices)."""
        if not self.sparse:
            return features * self.value_bytes
        return features * self.density * (self.value_bytes + self.index_bytes)


def is_glm_data(data: dict[str, Any]) -> bool:
    """A parsed TOML describes a GLM (it has a ``[glm]`` table)."""
    return "glm" in data


def read_glm(path: Path) -> GlmSpec:
    """The GLM a TOML file describes: its ``[glm]`` table through the strict schema (unknown keys, missing keys and
    wrong types are one-line errors naming the key), then the rules no GLM breaks."""
    data = read_toml(path)
    where = str(path)
    check_keys(data, ("glm",), where)
    raw = dict(table(data["glm"], f"{where}: [glm]"))
    raw.setdefault("name", path.stem)
    spec = build(GlmSpec, raw, f"{where}: [glm]")
    check_glm(spec, where)
    return spec


def check_glm(spec: GlmSpec, where: str) -> None:
    """Refuse what no GLM job can be."""
    for name in ("samples", "features", "batch", "value_bytes", "index_bytes"):
        if getattr(spec, name) <= 0:
            raise ConfigError(f"{where}: [glm].{name}={getattr(spec, name)} must be > 0")
    if spec.batch > spec.samples:
        raise ConfigError(f"{where}: [glm].batch={spec.batch} must be at most samples={spec.samples}")
    if not 0.0 < spec.density <= 1.0:
        raise ConfigError(f"{where}: [glm].density={spec.density} must lie in (0, 1]")
    if not spec.learning_rate > 0.0 or not spec.l2 >= 0.0:
        raise ConfigError(f"{where}: [glm].learning_rate={spec.learning_rate} must be > 0 and l2={spec.l2} >= 0")
