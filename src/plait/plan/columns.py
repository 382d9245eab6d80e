"""Many plans as columns: one numpy array per Plan field (STYLE.md rule 9, "keep it vectorized").

The planner enumerates hundreds of thousands of candidates; the cost model evaluates them
column-wise. A single plan is the same columns holding plain Python values (:meth:`PlanColumns.one`), so the
estimator and the planner share one implementation, run through :attr:`PlanColumns.xp`
(:mod:`plait.plan.ops`). Closed choices are stored as small integer codes into ``CHOICES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, get_args

import numpy as np

from plait.plan.ops import ARRAY, SCALAR, Ops
from plait.plan.plan import GradDtype, Optimizer, Plan, Precision, Recompute, Schedule, Sharding
from plait.sync import SyncMethod
from plait.sync.codes import code_of, method_of

CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": get_args(Schedule), "sharding": get_args(Sharding), "recompute": get_args(Recompute),
    "precision": get_args(Precision), "grad_reduce_dtype": get_args(GradDtype), "optimizer": get_args(Optimizer),
}
BOOLS = ("sp", "master_weights", "offload_optimizer", "offload_params", "overlap_grad_reduce", "tp_comm_overlap")
TEXTS = ("dp_sync",)
"""Open-ended fields (the synchronization method), stored as codes interned in :mod:`plait.sync.codes`
(``allreduce`` is 0)."""
FIELDS = tuple(f.name for f in fields(Plan))


_CODES = {(field, value): i for field, values in CHOICES.items() for i, value in enumerate(values)}


def code(field: str, value: str | SyncMethod) -> int:
    """Integer code of a closed choice (or of an open field's value, interned)."""
    if field in TEXTS:
        assert isinstance(value, SyncMethod), f"{field}={value!r} must be parsed (plait.sync.parse)"
        return code_of(value)
    found = _CODES.get((field, value))
    if found is None:
        raise ValueError(f"{field}={value!r} must be one of {CHOICES[field]}")
    return found


@dataclass(frozen=True)
class PlanColumns:
    """Plan fields as equal-length arrays (int64 for counts and codes, bool for flags), or, for the one plan
    ``single``, as that plan's Python values."""

    data: dict[str, Any]
    single: Plan | None = None
    """The plan whose values ``data`` holds as scalars (:meth:`one`); ``None`` for array columns."""

    def __post_init__(self) -> None:
        assert set(self.data) == set(FIELDS), "columns must cover every Plan field"
        if self.single is None:
            assert len({len(v) for v in self.data.values()}) == 1, "columns must have equal length"
        object.__setattr__(self, "xp", SCALAR if self.single is not None else ARRAY)

    def __len__(self) -> int:
        return 1 if self.single is not None else len(self.data["tp"])

    xp: Ops = field(init=False, repr=False, compare=False)
    """The operations for these columns: numpy (arrays) or plain Python (one plan)."""

    def zeros(self) -> Any:
        """0.0 per row, as a new column."""
        return 0.0 if self.single is not None else np.zeros(len(self))

    def full(self, value: Any) -> Any:
        """``value`` on every row (a model-wide fact as a mask, a constant as a column)."""
        return value if self.single is not None else np.full(len(self), value)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def is_(self, field: str, value: str) -> np.ndarray:
        """Mask of rows whose closed choice ``field`` equals ``value``."""
        return self.data[field] == _CODES[(field, value)]

    @classmethod
    def from_plans(cls, plans: list[Plan]) -> PlanColumns:
        """Columns of explicit plans."""
        data: dict[str, Any] = {}
        for name in FIELDS:
            values = [getattr(p, name) for p in plans]
            if name in CHOICES or name in TEXTS:
                data[name] = np.array([code(name, v) for v in values], dtype=np.int64)
            elif name in BOOLS:
                data[name] = np.array(values, dtype=bool)
            else:
                data[name] = np.array(values, dtype=np.int64)
        return cls(data)

    @classmethod
    def one(cls, plan: Plan) -> PlanColumns:
        """The columns of one plan as its Python values (codes for closed choices): the single-plan path."""
        data = {name: getattr(plan, name) for name in FIELDS}
        for name in (*CHOICES, *TEXTS):
            data[name] = code(name, data[name])
        return cls(data, single=plan)

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
                value = code(name, value) if name in CHOICES or name in TEXTS else value
                data[name] = np.full(length, value, dtype=bool if name in BOOLS else np.int64)
        return cls(data)

    def take(self, index: np.ndarray) -> PlanColumns:
        """Rows ``index`` (an integer index or boolean mask; of a single plan, an integer array repeats it)."""
        if self.single is not None:
            return PlanColumns.from_plans([self.single]).take(np.zeros(len(index), dtype=np.int64))
        return PlanColumns({k: v[index] for k, v in self.data.items()})

    def plan(self, row: int) -> Plan:
        """Row ``row`` back as a Plan."""
        if self.single is not None:
            return self.single
        kwargs: dict[str, Any] = {}
        for name in FIELDS:
            value = self.data[name][row]
            if name in CHOICES:
                kwargs[name] = CHOICES[name][int(value)]
            elif name in TEXTS:
                kwargs[name] = method_of(int(value))
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
        maximum = self.xp.maximum
        per_replica = self.data["global_batch"] // maximum(self.dp, 1)
        return maximum(per_replica // maximum(self.data["micro_batch"], 1), 1)
