"""Prune the declared space before its cross product, so that a search builds only the plans that survive.

A layout's candidates are the product of small option lists (:mod:`plait.search.enumerate`, the last varying
fastest). Each pruning rule (the plan's rules, the search's and the engine's refusals, in the order of
:func:`plait.search.rules.prune` and :func:`plait.engine.capability.unsupported_index`) reads a few of those lists:
checked on the product of only those lists (a *group*), its verdict holds for every candidate that shares them.
Groups are disjoint, so a candidate's first broken rule is the first over its groups, and the candidates whose
first broken rule is at or after rule ``r`` are, per layout, the product over groups of the group rows whose first
broken rule is at or after ``r``: every rule's count follows from each group's histogram, and the candidates that
break no rule are the product of each group's passing rows, built in the space's order.

Which lists a rule reads is observed, not declared: the checks run on columns that note the fields read, and a
rule that reads a list outside its group joins the groups, and the layouts are checked again. This relies on a
rule deciding each row from that row's fields alone, as it does for a single plan (:func:`plait.plan.rules.check_plan`
runs the same masks on one plan's columns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plait.engine.capability import unsupported_masks
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.rules import RULES as PLAN_RULES
from plait.search.enumerate import layout_options, layouts
from plait.search.noting import LazyColumns, Noting
from plait.search.rules import ENGINE_CODE, SEARCH_RULES
from plait.search.space import SearchSpace
from plait.workload.model import ModelSpec

Check = Callable[[PlanColumns], Any]
GROUP_ROWS = 1 << 18
"""Candidates (of the full product) whose layouts are checked together: bounds the groups' tables, which are at
most this large where every list is read together."""


def checks(model: ModelSpec, cluster: Cluster, space: SearchSpace, engine: Engine) -> list[tuple[int, Check]]:
    """(verdict code, mask of the rows breaking it) of every rule, in the order verdicts are given."""
    out: list[tuple[int, Check]] = [(i, lambda c, r=rule: r.broken(c, model, cluster))
                                    for i, rule in enumerate(PLAN_RULES)]
    out += [(len(PLAN_RULES) + i, lambda c, r=rule: r.broken(c, model, cluster, space))
            for i, rule in enumerate(SEARCH_RULES)]
    out += [(ENGINE_CODE + i, lambda c, m=mask: m(c, model)) for i, mask in enumerate(unsupported_masks(engine))]
    return out


@dataclass
class _Space:
    """The layouts' option lists as flat tables: per field its values over every layout (the layout's options of
    the field's list from ``offset``), per layout and list the options' count and the list's stride in the product."""

    fields: dict[str, np.ndarray]
    axis: dict[str, int]
    sizes: np.ndarray
    offset: np.ndarray
    strides: np.ndarray
    varying: frozenset[int]
    """Lists with more than one option in some layout (the others never split a group)."""

    @classmethod
    def of(cls, model: ModelSpec, space: SearchSpace) -> _Space:
        options = layout_options(model, space)
        sizes = np.array([[len(next(iter(o.values()))) for o in lists] for lists in options], dtype=np.int64)
        axis = {name: a for a, o in enumerate(options[0]) for name in o}
        assert all({n: a for a, o in enumerate(lists) for n in o} == axis for lists in options)
        fields = {name: np.concatenate([lists[a][name] for lists in options]).astype(options[0][a][name].dtype)
                  for name, a in axis.items()}
        offset = np.cumsum(sizes, axis=0) - sizes
        strides = np.cumprod(sizes[:, ::-1], axis=1)[:, ::-1] // sizes
        return cls(fields, axis, sizes, offset, strides, frozenset(np.flatnonzero(sizes.max(axis=0) > 1).tolist()))

    def rows(self, layout: np.ndarray, lin: np.ndarray, space: SearchSpace) -> dict[str, np.ndarray]:
        """The columns of the rows at place ``lin`` of layout ``layout``'s product."""
        at = {a: self.offset[layout, a] + (lin // self.strides[layout, a]) % self.sizes[layout, a]
              if a in self.varying else self.offset[layout, a] for a in set(self.axis.values())}
        out = {name: values[at[self.axis[name]]] for name, values in self.fields.items()}
        out["seq_len"] = np.full(len(layout), space.seq_len, dtype=np.int64)
        return out


@dataclass
class _Table:
    """One group's product of options over a run of layouts: per row its layout, option per list and its place
    in the layout's product (``lin``, the sum of option times stride over the group's lists)."""

    layout: np.ndarray
    index: dict[int, np.ndarray]
    """Option per row of each of the group's lists (the others': the first)."""
    lin: np.ndarray
    cols: PlanColumns | None = None

    @classmethod
    def of(cls, s: _Space, lo: int, hi: int, group: tuple[int, ...]) -> _Table:
        counts = np.prod(s.sizes[lo:hi][:, list(group)], axis=1) if group else np.ones(hi - lo, dtype=np.int64)
        layout = np.repeat(np.arange(lo, hi), counts)
        k = np.arange(len(layout)) - np.repeat(np.cumsum(counts) - counts, counts)
        index: dict[int, np.ndarray] = {}
        lin = np.zeros(len(layout), dtype=np.int64)
        for a in reversed(group):
            size = s.sizes[layout, a]
            index[a] = k % size
            k //= size
            lin += index[a] * s.strides[layout, a]
        return cls(layout, index, lin)

    def columns(self, s: _Space, space: SearchSpace) -> PlanColumns:
        """The table's rows as plan columns, each field built when a rule first reads it."""
        if self.cols is None:
            at: dict[int, np.ndarray] = {}
            defaults = PlanColumns.from_arrays({"seq_len": np.array([space.seq_len])}, 1, space.methods).data

            def build(name: str) -> np.ndarray:
                if name not in s.axis:  # a field no list sets: the space's sequence or the plan's default
                    return np.full(len(self.layout), defaults[name][0], dtype=defaults[name].dtype)
                a = s.axis[name]
                if a not in at:
                    at[a] = s.offset[self.layout, a] + self.index[a] if a in self.index else s.offset[self.layout, a]
                return s.fields[name][at[a]]

            self.cols = LazyColumns(Noting(build), methods=space.methods)
        return self.cols


@dataclass
class _Groups:
    """Lists read together (a partition of the varying lists) and the lists each rule was seen to read."""

    parts: list[frozenset[int]]
    reads: dict[int, frozenset[int]] = field(default_factory=dict)

    def of(self, lists: frozenset[int]) -> frozenset[int]:
        """The union of the parts that ``lists`` touch (empty: the layout alone)."""
        return frozenset().union(*(p for p in self.parts if p & lists))

    def splits(self, lists: frozenset[int]) -> bool:
        """Whether ``lists`` fall in more than one part."""
        return sum(1 for p in self.parts if p & lists) > 1

    def join(self, lists: frozenset[int]) -> None:
        joined = self.of(lists)
        self.parts = [p for p in self.parts if not p & lists] + [joined]


def pruned(model: ModelSpec, cluster: Cluster, space: SearchSpace, engine: Engine,
           reads: dict[int, frozenset[int]] | None = None) -> tuple[PlanColumns, dict[int, int], int]:
    """(the candidates that break no rule, in the space's order; candidates per verdict code; candidates in all).
    ``reads``: the lists each rule was seen to read by an earlier search (filled with this one's). A hint only: the
    groups start joined to hold them, so a rule is not checked first on too small a group and again; each check
    still notes what it reads, and a larger group gives the same verdicts (module docstring)."""
    s = _Space.of(model, space) if layouts(space) else None
    if s is None:
        return PlanColumns.from_arrays({}, 0, space.methods), {}, 0
    rules = checks(model, cluster, space, engine)
    groups = _Groups([frozenset([a]) for a in sorted(s.varying)])
    for pos, lists in (reads or {}).items():
        groups.reads[pos] = lists & s.varying
        if groups.splits(groups.reads[pos]):  # every rule's lists within one group, as the checks leave them
            groups.join(groups.reads[pos])
    counts = np.zeros(len(rules), dtype=np.int64)
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    full = np.prod(s.sizes, axis=1)
    lo = 0
    while lo < len(full):
        hi = lo + 1
        while hi < len(full) and full[lo:hi + 1].sum() <= GROUP_ROWS:
            hi += 1
        found, survivors = _layouts(s, lo, hi, space, rules, groups)
        counts += found
        kept.append(survivors)
        lo = hi
    if reads is not None:
        reads.update(groups.reads)
    layout = np.concatenate([k[0] for k in kept])
    lin = np.concatenate([k[1] for k in kept])
    cols = PlanColumns.from_arrays(s.rows(layout, lin, space), len(layout), space.methods)
    return cols, {code: int(n) for (code, _), n in zip(rules, counts) if n}, int(full.sum())


def _layouts(s: _Space, lo: int, hi: int, space: SearchSpace, rules: list[tuple[int, Check]],
             groups: _Groups) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Layouts ``lo:hi`` checked by groups: (candidates per rule, (layout, place in its product) of the survivors).
    A rule that reads lists of two groups joins them, and the layouts are checked again."""
    while True:
        tables: dict[frozenset[int], _Table] = {}
        first: dict[frozenset[int], np.ndarray] = {}
        for pos, (_, check) in enumerate(rules):
            group = groups.of(groups.reads.get(pos, frozenset()))
            while True:
                if group not in tables:
                    tables[group] = _Table.of(s, lo, hi, tuple(sorted(group)))
                    first[group] = np.full(len(tables[group].layout), len(rules), dtype=np.int64)
                mask, read = _check(s, tables[group].columns(s, space), check)
                groups.reads[pos] = read | group
                if read <= group or groups.splits(read | group):
                    break
                group = groups.of(read | group)  # a group read so far by other rules only
            if not read <= group:
                groups.join(read | group)
                break
            now = first[group]
            now[(now == len(rules)) & mask] = pos
        else:
            for group in groups.parts:  # the lists no rule reads: every option passes
                if group not in tables:
                    tables[group] = _Table.of(s, lo, hi, tuple(sorted(group)))
                    first[group] = np.full(len(tables[group].layout), len(rules), dtype=np.int64)
            return _combine(lo, hi, len(rules), tables, first)


def _check(s: _Space, cols: PlanColumns, check: Check) -> tuple[np.ndarray, frozenset[int]]:
    """The rows of ``cols`` breaking ``check`` and the varying lists it read."""
    noted = cols.data
    noted.reads = set()
    try:
        with np.errstate(divide="ignore", invalid="ignore"):  # as plait.plan.rules.broken_rule_index
            mask = np.asarray(check(cols), dtype=bool)
        mask = mask if mask.shape == (len(cols),) else np.broadcast_to(mask, (len(cols),))  # most: a row each
        return mask, frozenset(s.axis[f] for f in noted.reads if f in s.axis) & s.varying
    finally:
        noted.reads = None


def _combine(lo: int, hi: int, num_rules: int, tables: dict[frozenset[int], _Table],
             first: dict[frozenset[int], np.ndarray]) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Candidates per first broken rule over the groups' products, and the survivors (layout, place), in order."""
    product = np.ones((hi - lo, num_rules + 1), dtype=np.int64)
    for group, table in tables.items():
        hist = np.bincount((table.layout - lo) * (num_rules + 1) + first[group],
                           minlength=(hi - lo) * (num_rules + 1)).reshape(hi - lo, num_rules + 1)
        product *= hist[:, ::-1].cumsum(axis=1)[:, ::-1]  # rows whose first broken rule is at or after each
    counts = (product[:, :-1] - product[:, 1:]).sum(axis=0)
    passing = {g: (t.layout[first[g] == num_rules], t.lin[first[g] == num_rules]) for g, t in tables.items()}
    layouts_out, lins = [], []
    for layout in np.flatnonzero(product[:, -1]) + lo:
        places = np.zeros(1, dtype=np.int64)
        for where, lin in passing.values():
            span = np.searchsorted(where, [layout, layout + 1])
            places = (places[:, None] + lin[span[0]:span[1]]).ravel()
        places.sort()
        layouts_out.append(np.full(len(places), layout, dtype=np.int64))
        lins.append(places)
    empty = np.zeros(0, dtype=np.int64)
    return counts, (np.concatenate(layouts_out) if lins else empty, np.concatenate(lins) if lins else empty)
