"""Many plans as columns: one numpy array per Plan field (STYLE.md rule 9, "keep it vectorized").

The planner enumerates hundreds of thousands of candidates; the cost model evaluates them
column-wise. A single plan is the same columns holding plain Python values (:meth:`PlanColumns.one`), so the
estimator and the planner share one implementation, run through :attr:`PlanColumns.xp`
(:mod:`plait.plan.ops`). numpy is imported by the methods that build or read array columns, never by a single
plan's (``plait estimate`` runs without it, ``tests/test_lazy_imports.py``). Closed choices are stored as small
integer codes into ``CHOICES``; the synchronization method as its index into the columns' own table of methods
(:attr:`PlanColumns.methods`), which travels with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from plait.plan.ops import SCALAR, Ops
from plait.plan.plan import (
    PER_STAGE_FIELDS,
    CpAttention,
    GradDtype,
    Optimizer,
    Plan,
    Precision,
    Recompute,
    Schedule,
    Sharding,
    TpMode,
)
from plait.sync import ALLREDUCE, SyncMethod

if TYPE_CHECKING:
    import numpy as np

CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": get_args(Schedule), "sharding": get_args(Sharding), "recompute": get_args(Recompute),
    "precision": get_args(Precision), "grad_reduce_dtype": get_args(GradDtype), "optimizer": get_args(Optimizer),
    "cp_attention": get_args(CpAttention), "tp_mode": get_args(TpMode),
}
BOOLS = ("sp", "master_weights", "offload_optimizer", "offload_params", "swap_activations", "overlap_grad_reduce",
         "tp_comm_overlap")
TEXTS = ("dp_sync",)
"""Open-ended fields (the synchronization method), stored as indices into :attr:`PlanColumns.methods`."""
FIELDS = tuple(f.name for f in fields(Plan) if f.name not in PER_STAGE_FIELDS)
"""Plan fields held as columns: every one but the per-stage tuples (a plan with those is costed stage by stage,
:mod:`plait.cost.per_stage`; its columns, :meth:`PlanColumns.one`, are those of its stage-0 uniform form)."""
_FIELD_SET = frozenset(FIELDS)
_FIELD_VALUES = attrgetter(*FIELDS)
"""A plan's values of :data:`FIELDS`, as a tuple in their order (one call)."""


T = TypeVar("T")
_CODES = {(field, value): i for field, values in CHOICES.items() for i, value in enumerate(values)}
_FIELD_CODES = {field: {value: i for i, value in enumerate(values)} for field, values in CHOICES.items()}
""":data:`_CODES` by field, then value (no pair to build and hash per lookup)."""


def method_table(methods: Any) -> tuple[SyncMethod, ...]:
    """A table of distinct ``methods`` for plan columns: the all-reduce first (code 0), then the others in order."""
    return tuple(dict.fromkeys((ALLREDUCE, *methods)))


def code(field: str, value: str) -> int:
    """Integer code of a closed choice."""
    found = _CODES.get((field, value))
    if found is None:
        raise ValueError(f"{field}={value!r} must be one of {CHOICES[field]}")
    return found


def per_plan(derive: Callable[[PlanColumns], T]) -> Callable[[PlanColumns], T]:
    """``derive(cols)`` kept on the columns of a single plan, which one estimate asks for it many times (a derived
    value of the plan alone, immutable); derived afresh for array columns."""
    def kept(cols: PlanColumns) -> T:
        if cols.single is None:
            return derive(cols)
        memo = cols.memo
        found = memo.get(derive, memo)  # the memo itself: not derived yet (one lookup, not two)
        if found is memo:
            found = memo[derive] = derive(cols)
        return found  # type: ignore[no-any-return]

    kept.__name__, kept.__qualname__, kept.__doc__ = derive.__name__, derive.__qualname__, derive.__doc__
    return kept


@dataclass(frozen=True)
class PlanColumns:
    """Plan fields as equal-length arrays (int64 for counts and codes, bool for flags), or, for the one plan
    ``single``, as that plan's Python values."""

    data: dict[str, Any]
    single: Plan | None = None
    """The plan whose values ``data`` holds as scalars (:meth:`one`); ``None`` for array columns."""
    methods: tuple[SyncMethod, ...] = (ALLREDUCE,)
    """The synchronization methods the ``dp_sync`` column indexes (:func:`method_table`: the all-reduce is 0)."""

    def __post_init__(self) -> None:
        assert self.data.keys() == _FIELD_SET, "columns must cover every Plan field"
        if self.single is None:
            assert len({len(v) for v in self.data.values()}) == 1, "columns must have equal length"
        if self.single is not None:
            object.__setattr__(self, "xp", SCALAR)
        else:
            from plait.plan.array_ops import ARRAY  # array columns only: numpy's operations

            object.__setattr__(self, "xp", ARRAY)

    def __len__(self) -> int:
        return 1 if self.single is not None else len(self.data["tp"])

    xp: Ops = field(init=False, repr=False, compare=False)
    """The operations for these columns: numpy (arrays) or plain Python (one plan)."""
    memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """A single plan's derived values (:func:`per_plan`), kept as they are first asked for."""

    def zeros(self) -> Any:
        """0.0 per row, as a new column."""
        if self.single is not None:
            return 0.0
        import numpy as np  # array columns only (see the module docstring)

        return np.zeros(len(self))

    def full(self, value: Any) -> Any:
        """``value`` on every row (a model-wide fact as a mask, a constant as a column)."""
        if self.single is not None:
            return value
        import numpy as np  # array columns only (see the module docstring)

        return np.full(len(self), value)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def is_(self, field: str, value: str) -> np.ndarray:
        """Mask of rows whose closed choice ``field`` equals ``value``."""
        return self.data[field] == _FIELD_CODES[field][value]

    def sync_rows(self, question: Callable[[SyncMethod], bool]) -> Any:
        """Mask of rows whose synchronization method answers ``question`` with yes (asked once per method, then
        looked up per row)."""
        if self.xp.scalar:  # one plan: one lookup
            return question(self.methods[self.data["dp_sync"]])
        import numpy as np  # array columns only (see the module docstring)

        return np.array([bool(question(method)) for method in self.methods])[self.data["dp_sync"]]

    def sync_values(self, value: Callable[[SyncMethod], Any], fill: Any) -> Any:
        """Per row, ``value(method)`` of the row's method (asked once per method, then looked up per row; ``fill``:
        the column's type)."""
        if self.xp.scalar:
            return value(self.methods[self.data["dp_sync"]])
        import numpy as np  # array columns only (see the module docstring)

        table = np.array([value(method) for method in self.methods])
        return table.astype(np.result_type(np.asarray(fill).dtype, table.dtype))[self.data["dp_sync"]]

    @classmethod
    def from_plans(cls, plans: list[Plan]) -> PlanColumns:
        """Columns of explicit plans."""
        import numpy as np  # array columns only (see the module docstring)

        methods = method_table(p.dp_sync for p in plans)
        index = {m: i for i, m in enumerate(methods)}
        data: dict[str, Any] = {}
        for name in FIELDS:
            values = [getattr(p, name) for p in plans]
            if name in TEXTS:
                data[name] = np.array([index[v] for v in values], dtype=np.int64)
            elif name in CHOICES:
                data[name] = np.array([code(name, v) for v in values], dtype=np.int64)
            elif name in BOOLS:
                data[name] = np.array(values, dtype=bool)
            else:
                data[name] = np.array(values, dtype=np.int64)
        return cls(data, methods=methods)

    @classmethod
    def one(cls, plan: Plan) -> PlanColumns:
        """The columns of one plan as its Python values (codes for closed choices): the single-plan path."""
        data = dict(zip(FIELDS, _FIELD_VALUES(plan)))
        for name in CHOICES:  # the plan checked its choices when it was built: each has a code
            data[name] = _CODES[(name, data[name])]
        methods = (ALLREDUCE,) if plan.dp_sync.is_allreduce else (ALLREDUCE, plan.dp_sync)
        data["dp_sync"] = len(methods) - 1
        return cls(data, single=plan, methods=methods)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], length: int,
                    methods: tuple[SyncMethod, ...] = (ALLREDUCE,)) -> PlanColumns:
        """Columns from enumerated arrays (``dp_sync``: indices into ``methods``, :func:`method_table`); fields not
        given take the Plan default."""
        import numpy as np  # array columns only (see the module docstring)

        default = Plan()
        data: dict[str, np.ndarray] = {}
        for name in FIELDS:
            if name in arrays:
                data[name] = np.asarray(arrays[name])
            else:
                value = getattr(default, name)
                value = code(name, value) if name in CHOICES else methods.index(value) if name in TEXTS else value
                data[name] = np.full(length, value, dtype=bool if name in BOOLS else np.int64)
        return cls(data, methods=methods)

    @classmethod
    def concat(cls, parts: list[PlanColumns]) -> PlanColumns:
        """The rows of ``parts`` (array columns over one table of methods), one after another."""
        assert parts and all(p.single is None and p.methods == parts[0].methods for p in parts)
        if len(parts) == 1:
            return parts[0]
        import numpy as np  # array columns only (see the module docstring)

        return cls({k: np.concatenate([p.data[k] for p in parts]) for k in parts[0].data}, methods=parts[0].methods)

    def take(self, index: np.ndarray | slice) -> PlanColumns:
        """Rows ``index`` (an integer index, a boolean mask, or a slice, whose columns are views; of a single plan, an
        integer array repeats it)."""
        if self.single is not None:
            return PlanColumns.from_plans([self.single]).take([0] * len(index))
        return PlanColumns({k: v[index] for k, v in self.data.items()}, methods=self.methods)

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
                kwargs[name] = self.methods[int(value)]
            elif name in BOOLS:
                kwargs[name] = bool(value)
            else:
                kwargs[name] = int(value)
        return Plan(**kwargs)

    def plans(self, rows: np.ndarray) -> list[Plan]:
        """Rows ``rows`` back as Plans (:meth:`plan` of each, their values read out a column at a time)."""
        assert self.single is None, "one plan's columns: plan()"
        values: dict[str, list[Any]] = {}
        for name in FIELDS:
            column = self.data[name][rows]
            if name in CHOICES:
                values[name] = [CHOICES[name][v] for v in column.tolist()]
            elif name in TEXTS:
                values[name] = [self.methods[v] for v in column.tolist()]
            elif name in BOOLS:
                values[name] = column.astype(bool).tolist()
            else:
                values[name] = column.astype("int64").tolist()
        return [Plan(**dict(zip(FIELDS, row))) for row in zip(*(values[name] for name in FIELDS))]

    # --- derived columns ---------------------------------------------------------------
    @property
    def dp(self) -> np.ndarray:
        """Data-parallel degree."""
        return self.data["dp_replicate"] * self.data["dp_shard"]

    @property
    def num_gpus(self) -> np.ndarray:
        """GPUs per plan (of a single plan, its own count: stages may differ in TP degree, :attr:`Plan.stage_tp`)."""
        if self.single is not None:
            return self.single.num_gpus  # type: ignore[return-value]
        return self.data["pp"] * self.dp * self.data["cp"] * self.data["tp"]

    @property
    def fsdp_managed(self) -> np.ndarray:
        """Rows FSDP (zero2/zero3) wraps: parameters sharded over more than one dp x cp rank (:attr:`Plan.fsdp_managed`)."""
        return (self.dp * self.data["cp"] > 1) & (self.is_("sharding", "zero2") | self.is_("sharding", "zero3"))

    @property
    def num_micro_batches(self) -> np.ndarray:
        """Micro-batches per step per pipeline (of a single plan, kept: one estimate asks for it several times)."""
        if self.single is not None:
            found = self.memo.get("num_micro_batches")
            if found is None:
                found = self.memo["num_micro_batches"] = self._num_micro_batches()
            return found  # type: ignore[no-any-return]
        return self._num_micro_batches()

    def _num_micro_batches(self) -> np.ndarray:
        maximum = self.xp.maximum
        per_replica = self.data["global_batch"] // maximum(self.dp, 1)
        return maximum(per_replica // maximum(self.data["micro_batch"], 1), 1)
