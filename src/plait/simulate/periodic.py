"""A deep pipeline's sweep order from a short one's: the schedule's steady state repeats, so its order does too.

The sweep (:mod:`plait.simulate.pipeline`) replays one order of a step's operations in which every operation comes
after those it waits on; the order is found once per schedule shape by sweeping the ranks (the expensive part for
a deep pipeline: 1,024-2,048 micro-batches through 16-64 ranks take 0.1-0.5 s to order, 0.02-0.05 s to replay).
1F1B, interleaved 1F1B and ZB-H1 repeat their steady-state operations every ``c`` micro-batches (``c = 1``;
interleaved: ``c = p``, its groups of ``p`` micro-batches), so a step of ``m`` micro-batches is one of ``m_s = m - n c``
with ``n`` more periods in its middle. Cut every rank after the same backward, once at ``b`` and once ``c``
micro-batches later, each cut moved back until no operation before it waits on one after it (checked); the short
run's order is then its operations before the first cut, the period between the cuts ``n + 1`` times (each ``c``
micro-batches on) and its operations after the second cut (``n c`` on): every operation still comes after those it
waits on, so the replay gives every time of the full sweep to the bit (each time is ``max`` of the same two times
plus the same duration, in whatever order the operations are taken). The structure this rests on (the short run's
operations up to the second cut equal those of ``m_s + c`` micro-batches, which continue with the period shifted
by ``c`` and end with the short run's rest shifted by ``c``) is checked on the orders of ``m_s`` and ``m_s + c``;
that it holds for every further period is the schedules' regularity (each builds its steady state by one rule),
which ``tests/test_simulate_periodic.py`` checks by replaying against the full sweep, to the bit, over schedules,
depths and hundreds of added periods.
"""

from __future__ import annotations

from functools import lru_cache
from operator import itemgetter

import numpy as np

from plait.simulate.schedules import order
from plait.simulate.sweep_order import _steps, _sweep_order

PERIODIC = ("1f1b", "interleaved", "zb-h1")
"""Schedules whose steady state repeats (GPipe runs every forward before any backward: no repeating middle)."""
_Entry = tuple[int, int, int, int, int, bool]  # the sweep order's: rank, 3 x rank + kind, input, output, hop?, last?


def _period(schedule: str, p: int, v: int) -> int:
    """Micro-batches after which the schedule's steady state repeats (interleaved: its groups of ``p``)."""
    return p if schedule == "interleaved" and v > 1 else 1


def _shifted(ops: tuple[tuple[str, int, int], ...], c: int) -> tuple[tuple[str, int, int], ...]:
    return tuple((kind, micro + c, chunk) for kind, micro, chunk in ops)


def _cut_after(ops: tuple[tuple[str, int, int], ...], backwards: int) -> int:
    """Index just past the rank's ``backwards``-th backward (1-based) and the W that directly follows it, if any."""
    seen = 0
    for i, (kind, _, _) in enumerate(ops):
        if kind == "B":
            seen += 1
            if seen == backwards:
                return i + 2 if i + 1 < len(ops) and ops[i + 1][0] == "W" else i + 1
    return len(ops)


@lru_cache(maxsize=64)
def _producers(schedule: str, p: int, m: int, v: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per rank and operation, the rank and the index of the operation whose output it waits on (-1, -1: none)."""
    steps = [np.array([step[1:3] for step in ranked], dtype=np.int64) for ranked in _steps(schedule, p, m, v)]
    slots = 2 * m * p * v + 1
    rank_of, index_of = np.full(slots, -1, dtype=np.int64), np.full(slots, -1, dtype=np.int64)
    for r, table in enumerate(steps):
        filled = np.flatnonzero(table[:, 1] >= 0)
        rank_of[table[filled, 1]], index_of[table[filled, 1]] = r, filled
    waits = [table[:, 0] for table in steps]  # -1 (none) reads the last slot, which nothing fills
    return [rank_of[w] for w in waits], [index_of[w] for w in waits]


def _closed(producers: tuple[list[np.ndarray], list[np.ndarray]], cut: list[int]) -> list[int]:
    """The largest cut at or before ``cut`` (per rank, the operations before it) that no operation before it waits
    across: a rank's cut moves back to its first operation waiting on one past its producer's cut, until none does."""
    ranks, indices = producers
    cut, changed = list(cut), True
    while changed:
        changed = False
        ends = np.array([*cut, 1 << 62], dtype=np.int64)  # index -1 (no producer): never past its cut
        for r in range(len(cut)):
            across = np.flatnonzero(indices[r][:cut[r]] >= ends[ranks[r][:cut[r]]])
            if len(across):
                cut[r], changed = int(across[0]), True
    return cut


@lru_cache(maxsize=256)
def _cuts(schedule: str, p: int, m: int, v: int, b: int, period: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(first cut, second cut) per rank of ``m`` micro-batches, after backward ``b`` and ``period`` micro-batches
    (``period x v`` chunk passes) later, or None where the structure the order rests on does not hold (module
    docstring)."""
    producers = _producers(schedule, p, m, v)
    shorts = [order(schedule, p, m, r, v) for r in range(p)]
    first = _closed(producers, [_cut_after(short, b) for short in shorts])
    second = []
    for r in range(p):
        short, long = shorts[r], order(schedule, p, m + period, r, v)
        x1 = first[r]
        x2 = x1 + _cut_after(short, b + period * v) - _cut_after(short, b)  # one period of the rank's operations on
        if not (0 < x1 < x2 < len(short)):
            return None
        ops = x2 - x1
        if (long[:x2] != short[:x2] or long[x2 + ops:] != _shifted(short[x2:], period)
                or long[x2:x2 + ops] != _shifted(long[x1:x2], period)):
            return None
        second.append(x2)
    if _closed(producers, second) != second:
        return None
    return tuple(first), tuple(second)


@lru_cache(maxsize=256)
def _composed(schedule: str, p: int, m: int, v: int) -> tuple[tuple[_Entry, ...], tuple[_Entry, ...],
                                                             tuple[_Entry, ...], int, int, int] | None:
    """(the short run's order before the first cut, between the cuts, after the second; periods ``n`` to add; a
    period's shift of the input and output slots; slots needed) for ``m`` micro-batches, or None where the short
    run would not be at most half of ``m`` or its cuts do not hold. Slots are renumbered so that a shift by whole
    periods moves every one alike: activation ``k`` to ``2 k``, gradient ``k`` to ``2 k + 1``, then every block of
    one period's ``2 c p v`` of them followed by two slots of its own: one nobody writes, which an input from
    nothing (the first stage's forward) reads, and one nobody reads, which an output to nothing (its backward)
    writes, each in the block of the entry's other slot. So the whole step needs about one slot per activation and
    gradient, and a sweep that stops early (:mod:`plait.simulate.steady`) needs only the blocks it reaches."""
    if schedule not in PERIODIC or p < 2:
        return None
    c = _period(schedule, p, v)
    m_short = m % c + c * -(-max(((v + 1) * p + 2 * c * v) // v + 1 - m % c, 0) // c)  # the cuts fit (below)
    cuts = None
    while cuts is None and 2 * m_short <= m:
        b = m_short * v - (v + 1) * p - 2 * c * v  # the second cut a period before any rank's cool-down
        cuts = _cuts(schedule, p, m_short, v, b, c) if b > 0 else None
        m_short += c if cuts is None else 0
    if cuts is None:
        return None
    first, second = cuts
    stages, n = p * v, (m - m_short) // c
    grads, block = m_short * stages, 2 * c * stages  # a block: one period's activations and gradients
    past, shift = 2 * grads, block + 2  # the short run's slots; a period's shift, its block's own two included

    parts: tuple[list[_Entry], list[_Entry], list[_Entry]] = ([], [], [])
    seen = [0] * p
    for r, duration, wait, fill, hop, last in _sweep_order(schedule, p, m_short, v):
        i = seen[r]
        seen[r] += 1
        part = 0 if i < first[r] else 1 if i < second[r] else 2
        # computed here, not looked up: the replay reads these numbers in this order, so they lie next to their
        # entries in memory
        parts[part].append((r, duration, *_renumbered(wait, fill, grads, block), hop, last))
    size = ((past + n * block - 1) // block + 1) * shift  # every block the step reaches
    return tuple(parts[0]), tuple(parts[1]), tuple(parts[2]), n, shift, size


def _renumbered(wait: int, fill: int, grads: int, block: int) -> tuple[int, int]:
    """An entry's input and output slots as :func:`_composed` numbers them: activation ``s`` to ``2 s``, gradient
    ``s`` to ``2 (s - grads) + 1``, then two slots after each ``block`` of them; an input from nothing (a slot past
    the short run's ``2 grads``) reads its block's unwritten slot, an output to nothing writes its block's unread one
    (the block of the entry's other slot, or the first)."""
    past, shift = 2 * grads, block + 2

    def slot(s: int) -> int:
        x = 2 * s if s < grads else 2 * s - past + 1
        return x + x // block * 2

    if wait < past:
        wait = slot(wait)
        return wait, slot(fill) if fill < past else wait // shift * shift + block + 1
    if fill < past:
        fill = slot(fill)
        return fill // shift * shift + block, fill
    return block, block + 1


_WAIT, _FILL = itemgetter(2), itemgetter(3)  # an entry's input and output slots
_Plain = tuple[int, int, int, int]  # an entry less its hop and last-operation fields: one whose output hops
_Segments = tuple[tuple[tuple[_Plain, ...], _Entry | None], ...]
"""A part of the order as runs of entries whose output hops to a neighbouring stage and which are not a rank's last
operation, each run followed by one entry that is either (an output without a hop: the last stage's forward, read by
its own backward; a rank's last operation, whose start is kept), None after the part's last run: :func:`_replay`
replays the runs without asking of each entry which it is."""


@lru_cache(maxsize=256)
def _window(schedule: str, p: int, m: int, v: int) -> tuple[_Segments, _Segments, _Segments, int, int]:
    """(:func:`_composed`'s three parts as :data:`_Segments`; slots a replay keeps: those the operations before the
    first cut and a period reach, and at least a period's shift; those the part after the second cut reaches), each
    from the start of the slots of its part's first period (:func:`_slide`)."""
    composed = _composed(schedule, p, m, v)
    assert composed is not None, "a composed order"
    parts, shift = composed[:3], composed[4]
    reach = [1 + max(max(map(_WAIT, part)), max(map(_FILL, part))) if part else 0 for part in parts]
    before, period, after = (_segments(part) for part in parts)
    return before, period, after, max(reach[0], reach[1], shift), reach[2]


def _segments(entries: tuple[_Entry, ...]) -> _Segments:
    """``entries`` as runs each ended by an entry without a hop or a rank's last (:data:`_Segments`)."""
    out: list[tuple[tuple[_Plain, ...], _Entry | None]] = []
    run: list[_Plain] = []
    for entry in entries:
        if entry[5] or not entry[4]:
            out.append((tuple(run), entry))
            run = []
        else:
            run.append(entry[:4])
    return (*out, (tuple(run), None)) if run or not out else tuple(out)


def _slide(arrival_s: list[float], shift: int) -> None:
    """The slots of the next period's: the first ``shift`` dropped (no later operation reads them), as many unwritten
    ones (0.0) added at the end. A replay of :func:`_composed`'s order takes slot ``s`` of its ``j``-th period at
    place ``s`` after ``j`` slides: the entries' own numbers, without adding an offset per operation. The list keeps
    at least ``shift`` slots (:func:`_window`), so each slide moves the start by one shift."""
    del arrival_s[:shift]
    arrival_s += _zeros(shift)


@lru_cache(maxsize=64)
def _zeros(count: int) -> tuple[float, ...]:
    """``count`` unwritten slots, built once per period's shift (a slide adds them without building a list)."""
    return (0.0,) * count


def _grow(arrival_s: list[float], reach: int) -> None:
    """At least ``reach`` slots, the added ones unwritten (0.0)."""
    if reach > len(arrival_s):
        arrival_s += [0.0] * (reach - len(arrival_s))


def periodic_sweep(schedule: str, p: int, m: int, v: int, took: list[float],
                   hops: tuple[float, float]) -> tuple[list[float], list[float]] | None:
    """Every rank's end and the start of its last operation, as :func:`plait.simulate.pipeline._sweep` gives them
    (to the bit), replaying the short run's order with its period repeated (module docstring); None where the
    schedule or ``m`` does not allow it (the caller sweeps in full). ``took``: duration by ``3 x rank + kind``."""
    composed = _composed(schedule, p, m, v)
    if composed is None:
        return None
    n, shift = composed[3:5]
    before, period, after, window, reach_after = _window(schedule, p, m, v)
    arrival_s = [0.0] * window
    free, last_begin = [0.0] * p, [0.0] * p
    _replay(before, took, hops, arrival_s, free, last_begin)
    for j in range(n + 1):
        if j:
            _slide(arrival_s, shift)
        _replay(period, took, hops, arrival_s, free, last_begin)
    _grow(arrival_s, reach_after)
    _replay(after, took, hops, arrival_s, free, last_begin)
    return free, last_begin


UNROLLED_OPS = 4096
"""Most operations of a step whose composed order is kept written out (:func:`unrolled_order`): the small pipelines an
estimate simulates (at most 192 chunk passes, :data:`plait.predict.estimate.SIMULATED_PASSES`) fit, a deep one's
need not be held."""


@lru_cache(maxsize=256)
def unrolled_order(schedule: str, p: int, m: int, v: int) -> tuple[tuple[_Entry, ...], int] | None:
    """(:func:`_composed`'s order with its period written out ``n + 1`` times and every slot shifted where
    :func:`periodic_sweep` shifts it, the slots it needs): the same entries in the same order, so the same times to
    the bit, replayed in one loop without a call per period; None where the order is not composed or has more than
    :data:`UNROLLED_OPS` operations."""
    composed = _composed(schedule, p, m, v)
    if composed is None:
        return None
    before, period, after, n, shift, size = composed
    if len(before) + (n + 1) * len(period) + len(after) > UNROLLED_OPS:
        return None
    parts = [(before, 0), *((period, j * shift) for j in range(n + 1)), (after, n * shift)]
    return tuple((r, d, wait + offset, fill + offset, hop, last)
                 for entries, offset in parts for r, d, wait, fill, hop, last in entries), size


def _replay(segments: _Segments, took: list[float], hops: tuple[float, float], arrival_s: list[float],
            free: list[float], last_begin: list[float]) -> None:
    """:func:`plait.simulate.pipeline._sweep`'s arithmetic over a part of the order, in the slots of its period
    (:func:`_slide`): each run's entries with the hop added, then the entry that ends it as the sweep takes it. Each
    ``max`` is one conditional expression that takes the same operand, so the same times to the bit, in fewer
    interpreter steps."""
    hop_s = hops[1]
    for entries, special in segments:
        for r, duration, wait, fill in entries:
            arrival = arrival_s[wait]
            begin = free[r]
            now = free[r] = (arrival if arrival > begin else begin) + took[duration]
            arrival_s[fill] = now + hop_s
        if special is not None:
            r, duration, wait, fill, hop, last = special
            begin = free[r]
            arrival = arrival_s[wait]
            if arrival > begin:
                begin = arrival
            now = free[r] = begin + took[duration]
            arrival_s[fill] = now + hops[hop]
            if last:
                last_begin[r] = begin
