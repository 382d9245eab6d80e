"""A deep pipeline's step from its steady state: replay periods until the state repeats shifted in time, then
extrapolate over the rest.

:mod:`plait.simulate.periodic` replays a short run's order with its period (``c`` micro-batches) repeated ``n + 1``
times; each replay still takes every operation of the step (a 16-stage, 2,048-micro-batch, 6-chunk pipeline:
tens of milliseconds). The sweep's arithmetic is max-plus linear (every time is the ``max`` of two earlier times plus a
duration), so one period maps the state it starts from (every rank's end and the outputs later periods read) to the
next state, and shifting the whole state by ``t`` shifts every later time by ``t``. Once the state after period ``J``
is the state after period ``J - s`` shifted by one time ``delta`` (a max-plus system's periodic regime, ``s`` its
cyclicity: Baccelli, Cohen, Olsder, Quadrat 1992, *Synchronization and Linearity*, Sec. 3.7; Heidergott, Olsder,
van der Woude 2006, *Max Plus at Work*, Ch. 3), every later ``s`` periods repeat it ``delta`` on, so the state
after period ``J + k s`` is the state after ``J`` plus ``k delta``; the sweep jumps to the last such period before
the cool-down reads (``R`` periods before the end) and replays the rest and the cool-down from there as before.

Rounding: the sweep adds in floating point, so the two states agree only up to its rounding; they are taken as
shifted when every element's shift is within :data:`SPREAD` of the state's largest time of the others. A max-plus
map is non-expansive in the max norm, so a state shifted by ``delta`` up to ``e`` keeps every later shift within
``e`` of ``delta``: the times extrapolated over ``k`` repeats are within ``k e`` of a replay in exact arithmetic.
Measured against the full replay: ~1e-13 of the step (``tests/test_simulate_steady.py``; the planner's figures,
``benchmarks/plan_same.py``). A state that does not repeat within the periods checked is replayed in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from plait.simulate.periodic import _composed, _grow, _replay, _slide, _window, periodic_sweep

SPREAD = 2.0 ** -40
"""Largest relative spread (of the state's largest time) of the shifts of one state's elements taken as one shift:
~1e-12, above the sweep's rounding (a few ulps, 2^-52, a period) and far below any difference in the schedule."""
CYCLES = 2
"""Periods per stage a repeat is looked for over: a max-plus system's state may repeat only after several periods
(its cyclicity above 1: a 16-stage 1F1B pipeline whose first stage is slower, ``tests/test_simulate_steady.py``);
a state that repeats after more than ``CYCLES x p`` periods is replayed in full."""


@lru_cache(maxsize=256)
def _lags(schedule: str, p: int, m: int, v: int) -> tuple[tuple[int, ...], int, int] | None:
    """(the state: the places, after a period (:func:`plait.simulate.periodic._slide`), of the outputs later periods
    read, ordered by their slot and then by how many periods back from the latest they lie; one more than the most
    periods back a period reads; ``R``: one more than the most periods back the cool-down reads) of the composed
    order, or None where there is no composed order or a rank's last operation lies in the period. A read whose slot
    no period writes reads nothing written (0) or the warm-up's output, which the extrapolation leaves in place."""
    composed = _composed(schedule, p, m, v)
    if composed is None:
        return None
    _, period, after, _, shift, _ = composed
    if any(entry[5] for entry in period):
        return None
    fills = {entry[3] for entry in period}
    top = max(fills)

    def back(wait: int) -> int:  # periods back the producer runs (0: the same period); -1: no period's output
        for k in range(0, (top - wait) // shift + 1):
            if wait + k * shift in fills:
                return k
        return -1

    state = set()
    for entry in period:  # read k periods back: after period j, the outputs of periods j + 1 - k .. j are state
        k = back(entry[2])
        state.update((entry[2] + k * shift, d) for d in range(k))
    own = {entry[3] for entry in after}
    cool = 1 + max((back(entry[2]) for entry in after if entry[2] not in own), default=0)
    deepest = max((d + 1 for _, d in state), default=1)
    # slot f of the period d back lies at f - d x shift (>= 0: f is read from k > d periods back, at f - k x shift)
    return tuple(f - d * shift for f, d in sorted(state)), deepest, cool


@dataclass
class WarmUp:
    """The sweep's state after the composed order's operations before its first period and the first period
    (:func:`warm_up`), which :func:`steady_sweep` goes on from (its lists are taken over there)."""

    arrival_s: list[float]
    free: list[float]
    """Every rank's end so far: the end of its last operation run, exact (each operation runs after those it waits
    on, :mod:`plait.simulate.periodic`)."""
    last_begin: list[float]
    ends: list[list[float]]
    """Every rank's end after each period replayed (the first)."""
    states: list[list[float]]
    """The outputs later periods read (:func:`_lags`' places) after each period replayed (the first)."""
    left: tuple[int, ...]
    """Operations still to run after these, by duration index (``3 x rank + kind``)."""


def warm_up(schedule: str, p: int, m: int, v: int, took: list[float], hops: tuple[float, float]) -> WarmUp | None:
    """The operations before the first period and the first period replayed (the start of :func:`steady_sweep`,
    which goes on from it: no repeat is looked for before the second period); None where :func:`steady_sweep`
    takes no composed order with a steady state."""
    lags = _lags(schedule, p, m, v)
    if lags is None:
        return None
    places = lags[0]
    before, period, _, window, _ = _window(schedule, p, m, v)
    arrival_s = [0.0] * window
    free, last_begin = [0.0] * p, [0.0] * p
    _replay(before, took, hops, arrival_s, free, last_begin)
    _replay(period, took, hops, arrival_s, free, last_begin)  # period 0 (no rank's last operation: _lags)
    return WarmUp(arrival_s, free, last_begin, [free[:]], [[arrival_s[x] for x in places]], _left(schedule, p, m, v))


@lru_cache(maxsize=256)
def _left(schedule: str, p: int, m: int, v: int) -> tuple[int, ...]:
    """Operations of the composed order after its first period, by duration index: the period's ``n`` more times
    and the part after it."""
    _, period, after, n, _, _ = _composed(schedule, p, m, v)  # type: ignore[misc]
    left = [0] * (3 * p)
    for entries, times in ((period, n), (after, 1)):
        for entry in entries:
            left[entry[1]] += times
    return tuple(left)


def steady_sweep(schedule: str, p: int, m: int, v: int, took: list[float], hops: tuple[float, float],
                 warm: WarmUp | None = None) -> tuple[list[float], list[float]] | None:
    """Every rank's end and the start of its last operation, as :func:`plait.simulate.periodic.periodic_sweep`
    gives them up to rounding (module docstring); None where there is no composed order (the caller sweeps in
    full), that function's answer where the period holds a rank's last operation. ``took``: duration by
    ``3 x rank + kind``; ``warm``: :func:`warm_up` of the same arguments, when the caller has it (taken over).
    Once the sweep has jumped from period ``J`` to ``J + k s``, the periods after it and the cool-down take the slots
    of the periods after ``J`` (no period between wrote them; every one they read from earlier periods is the
    state's, shifted in place): the same times, in the slots of a step ``k s`` periods shorter."""
    lags = _lags(schedule, p, m, v)
    if lags is None:  # no composed order (None), or one whose period holds a rank's last operation
        return periodic_sweep(schedule, p, m, v, took, hops)
    _, entries, _, n, shift, _ = _composed(schedule, p, m, v)  # type: ignore[misc]
    operations = len(entries)  # a period's
    _, period, after, _, reach_after = _window(schedule, p, m, v)
    places, deepest, cool = lags
    warm = warm or warm_up(schedule, p, m, v, took, hops)
    arrival_s, free, last_begin = warm.arrival_s, warm.free, warm.last_begin  # type: ignore[union-attr]
    ends, states = warm.ends, warm.states  # type: ignore[union-attr]  # after each period replayed before a jump
    last, most = n - cool, CYCLES * p  # the last period to extrapolate to; the most periods a repeat may take
    gap = max(1, most * p // operations)  # periods between checks: a check costs at most the periods it follows
    check = deepest + 1  # >= 2: past the warm-up's one period
    j, skipped = len(ends), 0  # skipped: periods jumped over, whose slots the later ones take (docstring)
    while j <= n:
        _slide(arrival_s, shift)
        _replay(period, took, hops, arrival_s, free, last_begin)  # no rank's last operation (_lags)
        if not skipped:
            ends.append(free[:])
            states.append([arrival_s[x] for x in places])
        if j == check and j < last and not skipped:
            check += gap
            found = _repeat(ends, states, j, min(most, j - deepest))
            if found is not None and (last - j) // found[0] > 0:
                cycle, delta = found
                skipped = (last - j) // cycle * cycle
                _extrapolate(free, arrival_s, places, skipped // cycle * delta)
                j += skipped
        j += 1
    _grow(arrival_s, reach_after)
    _replay(after, took, hops, arrival_s, free, last_begin)
    return free, last_begin


def _repeat(ends: list[list[float]], states: list[list[float]], j: int, most: int) -> tuple[int, float] | None:
    """(``s``, the shift) of the fewest periods ``s <= most`` after which the state after period ``j`` (every rank's
    end and the outputs later periods read) is the state ``s`` periods earlier shifted by one time, up to
    :data:`SPREAD` of its largest time; None if none is."""
    now = ends[j] + states[j]
    slack = SPREAD * max(now)
    first, final = now[0], now[len(ends[j]) - 1]
    for cycle in range(1, most + 1):
        earlier = ends[j - cycle]
        # two ranks' shifts first, then every rank's: each rejects only a spread the whole state's is at least
        # (floating-point subtraction is monotone), so the checks find what comparing every element finds
        if abs((first - earlier[0]) - (final - earlier[-1])) > slack:
            continue
        shifts = [a - b for a, b in zip(ends[j], earlier, strict=True)]
        if max(shifts) - min(shifts) > slack:
            continue
        shifts = [a - b for a, b in zip(now, earlier + states[j - cycle], strict=True)]
        low, high = min(shifts), max(shifts)
        if high - low <= slack:
            return cycle, (low + high) / 2
    return None


def _extrapolate(free: list[float], arrival_s: list[float], places: tuple[int, ...], ahead: float) -> None:
    """Shift the state after the latest period by ``ahead``, in place: the state ``ahead`` periods on."""
    for r in range(len(free)):
        free[r] += ahead
    for x in places:
        arrival_s[x] += ahead
