"""A small pipeline's sweep written out as straight-line Python: one statement per operation, on local variables.

The sweep (:func:`plait.simulate.pipeline._sweep`) replays a fixed order of operations (:mod:`plait.simulate.
sweep_order`, :func:`plait.simulate.periodic.unrolled_order`); per operation it unpacks an entry and reads and
writes three lists (the rank's end, the input's arrival, the output's arrival): ~40 interpreter steps for one
``max`` and two additions. The order depends only on the schedule's shape, so for each shape the replay is
generated once as a function whose statements are the entries themselves, each rank's end and each arrival a local
variable (``f3``, ``a17``), each duration an argument (``t4``, by ``3 x rank + kind``): ~12 steps an operation
(the same idea as CPython's ``collections.namedtuple`` and ``torch.fx``, which build their code as source text).

Every time is the one :func:`plait.simulate.pipeline._sweep` computes, to the bit: each operation starts at
``arrival if arrival > end else end`` (the loop's ``if``, which takes the same operand) and ends at that plus its
duration, the same two floating-point operations on the same operands. Three statements are left out where their
result is known without them: an input nobody writes reads 0.0 (the sweep's unwritten slot), and ``0.0 > end`` is
false for every end (a sum of durations from +0.0, never below it), so the start is the rank's end; an output
nobody reads is not stored; an output without a hop is the end itself (``end + 0.0 == end`` for every end not
-0.0, which a sum from +0.0 never is). ``tests/test_simulate_sweep.py`` checks it against the loop to the bit.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from plait.simulate.periodic import _composed, unrolled_order
from plait.simulate.sweep_order import _sweep_order

STRAIGHT_OPS = 1024
"""Most operations of an order written out (:func:`straight_sweep`): the small pipelines an estimate simulates
(at most :data:`plait.predict.estimate.SIMULATED_PASSES` = 192 chunk passes, 2-3 operations each) fit; generating
costs 15-25 us an operation (4-10 ms for 256-576 operations, measured by timing :func:`straight_sweep` in one
process at load 5-7 on 2 cores, 2026-12-07), so a deep pipeline's order, long and seen rarely, keeps the loop."""

STRAIGHT_AFTER = 128
"""Sweeps of one schedule shape by the loop before it is written out (:func:`written_out`): generating costs as much
as 110-170 of its loop sweeps (1F1B p=2 m=64, interleaved p=4 m=16 v=3 and ZB-H1 p=8 m=24, measured by timing
:func:`straight_sweep` against ``_sweep``'s loop in one process, same load and date), so a shape is written out
once the loop has spent about that much on it (the ski-rental rule: never more than about twice the cheaper choice's
cost), and a shape swept a few times (a planner's many layouts) never pays for it."""

Sweep = Callable[[list[float], float], tuple[list[float], list[tuple[float, float]]]]
"""``(took, hop)`` -> every rank's end and the (start, end) of its last operation: ``took`` by ``3 x rank +
kind``, ``hop`` the point-to-point time between neighbouring stages."""


def _own(entries: tuple[tuple[int, int, int, int, int, bool], ...]) -> list[bool]:
    """Per entry, whether its input is its rank's own end: written without a hop by the rank's operation just
    before it (a last stage's forward, read by its backward), so ``arrival > end`` is false and the start is the
    end."""
    own, last_fill = [], [-1] * (1 + max(entry[0] for entry in entries))
    for r, _, wait, fill, hop, _ in entries:
        own.append(wait == last_fill[r])
        last_fill[r] = -1 if hop else fill
    return own


def _statements(entries: tuple[tuple[int, int, int, int, int, bool], ...]) -> list[str]:
    """One to three statements per entry (rank, duration index, input slot, output slot, hop?, last?)."""
    own = _own(entries)
    read = {entry[2] for entry, mine in zip(entries, own, strict=True) if not mine}
    written: set[int] = set()
    lines = []
    for (r, d, wait, fill, hop, last), mine in zip(entries, own, strict=True):
        start = f"(a{wait} if a{wait} > f{r} else f{r})" if wait in written and not mine else f"f{r}"
        if last:
            lines.append(f"l{r} = {start}")
            start = f"l{r}"
        lines.append(f"f{r} = {start} + t{d}")
        if fill in read:  # an output nobody reads (or only its own rank, next) is not stored
            written.add(fill)
            lines.append(f"a{fill} = f{r} + h" if hop else f"a{fill} = f{r}")
    return lines


_SWEEPS: dict[tuple[str, int, int, int], int] = {}
"""Sweeps so far by schedule shape (at most :data:`STRAIGHT_AFTER` + 1 counted)."""


def written_out(schedule: str, p: int, m: int, v: int) -> Sweep | None:
    """:func:`straight_sweep` of the shape once it has been swept :data:`STRAIGHT_AFTER` times; None before."""
    key = (schedule, p, m, v)
    seen = _SWEEPS.get(key, 0)
    if seen > STRAIGHT_AFTER:
        return straight_sweep(schedule, p, m, v)
    if len(_SWEEPS) >= 4096:  # bounded: a long search over many shapes starts counting afresh
        _SWEEPS.clear()
    _SWEEPS[key] = seen + 1
    return None


@lru_cache(maxsize=256)
def straight_sweep(schedule: str, p: int, m: int, v: int) -> Sweep | None:
    """The sweep of ``schedule`` over ``p`` ranks, ``m`` micro-batches, ``v`` chunks as one generated function (module
    docstring), over the order :func:`plait.simulate.pipeline._sweep` replays in a loop: a small pipeline's composed
    order written out, or, without a composed order, the full one; None where the order is neither (a deep
    pipeline's, replayed by period) or has more than :data:`STRAIGHT_OPS` operations."""
    unrolled = unrolled_order(schedule, p, m, v)
    if unrolled is not None:
        entries = unrolled[0]
    elif _composed(schedule, p, m, v) is None:
        entries = _sweep_order(schedule, p, m, v)
    else:
        return None
    if len(entries) > STRAIGHT_OPS:
        return None
    ranks = range(p)
    body = [
        f"{', '.join(f't{k}' for k in range(3 * p))}, = took",
        *(f"f{r} = l{r} = 0.0" for r in ranks),
        *_statements(entries),
        f"return [{', '.join(f'f{r}' for r in ranks)}], [{', '.join(f'(l{r}, f{r})' for r in ranks)}]",
    ]
    source = "def sweep(took, h):\n" + "".join(f"    {line}\n" for line in body)
    scope: dict[str, Sweep] = {}
    exec(compile(source, f"<straight sweep: {schedule} p={p} m={m} v={v}>", "exec"), scope)  # noqa: S102
    return scope["sweep"]
