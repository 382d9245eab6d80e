"""Many plans as columns: one numpy array per Plan field (STYLE.md rule 9, "keep it vectorized").

The planner enumerates hundreds of thousands of candidates; the cost model evaluates them
column-wise. A single plan is a batch of one, so the estimator and the planner share one
implementation. Closed choices are stored as small integer codes into ``CHOICES``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, get_args

import numpy as np

from plait.plan.plan import GradDtype, Optimizer, Plan, Precision, Recompute, Schedule, Sharding

CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": get_args(Schedule), "sharding": get_args(Sharding), "recompute": get_args(Recompute),
    "precision": get_args(Precision), "grad_reduce_dtype": get_args(GradDtype), "optimizer": get_args(Optimizer),
}
BOOLS = ("sp", "master_weights", "offload_optimizer", "offload_params", "overlap_grad_reduce", "tp_comm_overlap")
FIELDS = tuple(f.name for f in fields(Plan))


def code(field: str, value: str) -> int:
    """Integer code of a closed choice."""
    return CHOICES[field].index(value)


@dataclass(frozen=True)
class PlanColumns:
    """Plan fields as equal-length arrays (int64 for counts and codes, bool for flags)."""

    data: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        lengths = {len(v) for v in self.data.values()}
        assert len(lengths) == 1 and set(self.data) == set(FIELDS), "columns must cover every Plan field, equal length"

    def __len__(self) -> int:
        return len(self.data["tp"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def is_(self, field: str, value: str) -> np.ndarray:
        """Mask of rows whose closed choice ``field`` equals ``value``."""
        return self.data[field] == code(field, value)

    @classmethod
    def from_plans(cls, plans: list[Plan]) -> PlanColumns:
        """Columns of explicit plans."""
        data: dict[str, Any] = {}
        for name in FIELDS:
            values = [getattr(p, name) for p in plans]
            if name in CHOICES:
                data[name] = np.array([code(name, v) for v in values], dtype=np.int64)
            elif name in BOOLS:
                data[name] = np.array(values, dtype=bool)
            else:
                data[name] = np.array(values, dtype=np.int64)
        return cls(data)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], length: int) -> PlanColumns:
        """Columns from enumerated arrays; fields not given take the Plan default."""
        default = Plan()
        data: dict[str, np.ndarray] = {}
        for name in FIELDS:
            if name in arrays:
                data[name] = np.asarray(arrays[name])
            else:
                value = getattr(default, name)
                value = code(name, value) if name in CHOICES else value
                data[name] = np.full(length, value, dtype=bool if name in BOOLS else np.int64)
        return cls(data)

    def take(self, index: np.ndarray) -> PlanColumns:
        """Rows ``index`` (an integer index or boolean mask)."""
        return PlanColumns({k: v[index] for k, v in self.data.items()})

    def plan(self, row: int) -> Plan:
        """Row ``row`` back as a Plan."""
        kwargs: dict[str, Any] = {}
        for name in FIELDS:
            value = self.data[name][row]
            if name in CHOICES:
                kwargs[name] = CHOICES[name][int(value)]
            elif name in BOOLS:
                kwargs[name] = bool(value)
            else:
                kwargs[name] = int(value)
        return Plan(**kwargs)

    # --- derived columns ---------------------------------------------------------------
    @property
    def dp(self) -> np.ndarray:
        """Data-parallel degree."""
        return self.data["dp_replicate"] * self.data["dp_shard"]

    @property
    def num_gpus(self) -> np.ndarray:
        """GPUs per plan."""
        return self.data["pp"] * self.dp * self.data["cp"] * self.data["tp"]

    @property
    def fsdp_managed(self) -> np.ndarray:
        """Rows FSDP (zero2/zero3) wraps: parameters sharded over more than one dp x cp rank (:attr:`Plan.fsdp_managed`)."""
        return (self.dp * self.data["cp"] > 1) & (self.is_("sharding", "zero2") | self.is_("sharding", "zero3"))

    @property
    def num_micro_batches(self) -> np.ndarray:
        """Micro-batches per step per pipeline."""
        per_replica = self.data["global_batch"] // np.maximum(self.dp, 1)
        return np.maximum(per_replica // np.maximum(self.data["micro_batch"], 1), 1)
