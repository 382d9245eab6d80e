"""A classic row's ``framework`` cell (``plait/validate/data/classic_dp.csv``), parsed once where the row is predicted:
the framework that ran it and the NGC container it ran in, as ``plait/validate/data/classic_dp.md`` writes them
(``MXNet (NGC mxnet-22.10-py3, Horovod)``, ``TensorFlow 1.x (tf_cnn_benchmarks)``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast

from plait.errors import ConfigError

FrameworkName = Literal["PyTorch", "TensorFlow", "MXNet"]
FRAMEWORKS: tuple[FrameworkName, ...] = ("PyTorch", "TensorFlow", "MXNet")


@dataclass(frozen=True, kw_only=True)
class RowFramework:
    """What a row's ``framework`` cell says."""

    name: FrameworkName
    """The framework: the cell's first word."""
    container: str
    """The NGC container the run used (``20.06-tf1-py3``, ``mxnet-20.12-py3``: the word after ``NGC`` in the
    parentheses), or empty where the cell names none."""


def parse_framework(cell: str, where: str) -> RowFramework:
    """The framework and container of a ``framework`` cell; an unknown framework is an error naming the row."""
    name = cell.split(" ", 1)[0]
    if name not in FRAMEWORKS:
        raise ConfigError(f"{where}: framework {cell!r} must start with one of {', '.join(FRAMEWORKS)}")
    container = re.search(r"\(NGC ([^,)]+)", cell)
    return RowFramework(name=cast(FrameworkName, name), container=container.group(1) if container else "")
