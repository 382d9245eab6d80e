"""The order the sweep takes one step's operations in (:mod:`plait.simulate.pipeline`): which operation waits on
which input is fixed by the schedule, not by the durations, so the order is found once per schedule shape."""

from __future__ import annotations

from functools import lru_cache

from plait.simulate.schedules import order

_Step = tuple[int, int, int, int, int, int]  # (kind index, input slot or -1, output slot or -1, hop?, micro, chunk)


@lru_cache(maxsize=256)
def _steps(schedule: str, p: int, m: int, v: int) -> tuple[tuple[_Step, ...], ...]:
    """Every rank's operations with the slots they wait on and fill: slot ``j * p * v + s`` holds when micro-batch
    j's activation reaches global stage s, slot ``m * p * v`` further on when its gradient does (at the last stage:
    its forward's end, no hop). A backward's own forward always runs earlier on its rank (checked here), so a
    backward waits only for its gradient."""
    stages = p * v
    grads = m * stages
    out = []
    for rank in range(p):
        done, steps = set(), []
        for kind, micro, chunk in order(schedule, p, m, rank, v):
            stage = rank + chunk * p
            key = micro * stages + stage
            if kind == "F":
                done.add(key)
                last = stage == stages - 1
                steps.append((0, key if stage > 0 else -1, grads + key if last else key + 1, 0 if last else 1,
                              micro, chunk))
            elif kind == "B":
                assert key in done, f"{schedule}: rank {rank} runs B{micro} of chunk {chunk} before its F"
                steps.append((1, grads + key, grads + key - 1 if stage > 0 else -1, 1, micro, chunk))
            else:
                steps.append((2, -1, -1, 0, micro, chunk))
        out.append(tuple(steps))
    return tuple(out)


@lru_cache(maxsize=256)
def _sweep_order(schedule: str, p: int, m: int, v: int) -> tuple[tuple[int, int, int, int, int, bool], ...]:
    """Every operation of every rank in the order the sweep takes them (module docstring): (rank, 3 x rank + kind
    index, input slot, output slot, hop?, whether it is the rank's last). Which operation waits on which input is
    fixed by the schedule, not by the durations, so this order is too: replayed in one pass (:func:`_sweep`), it
    gives each operation the same start and end, to the bit, as sweeping the ranks again. An operation without an
    input reads slot ``2 m p v + 1``, which stays 0 (no later than any start); one without an output writes slot
    ``2 m p v``, which nothing reads. Every rank's last operation is a backward (or W), checked here."""
    nothing, never = 2 * m * p * v, 2 * m * p * v + 1
    ranks = []  # every rank's entries as the order gives them
    for r, steps in enumerate(_steps(schedule, p, m, v)):
        entries = [(r, 3 * r + kind, wait if wait >= 0 else never, fill if fill >= 0 else nothing, hop, False)
                   for kind, wait, fill, hop, _, _ in steps]
        if entries:  # the rank's last operation, a backward (or W)
            assert steps[-1][0], f"{schedule}: rank {r} ends on a forward"
            entries[-1] = (*entries[-1][:5], True)
        ranks.append(entries)
    filled = [False] * (2 * m * p * v + 2)
    filled[never] = True  # an operation without an input waits on nothing
    position, flat = [0] * p, []
    left = sum(len(entries) for entries in ranks)
    while left:
        progressed = False
        for r in range(p):
            entries, i = ranks[r], position[r]
            n = len(entries)
            while i < n:
                entry = entries[i]
                if not filled[entry[2]]:
                    break
                filled[entry[3]] = True  # (nothing: written, never read)
                i += 1
            if i > position[r]:
                flat += entries[position[r]:i]
                progressed, left = True, left - (i - position[r])
                position[r] = i
        assert progressed, f"schedule {schedule} deadlocks (p={p}, m={m}, v={v})"
    return tuple(flat)
