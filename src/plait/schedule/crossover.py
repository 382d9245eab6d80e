"""The crossover policy: first come, first served, and a job that cannot start on free GPUs time-shares those of a
running job of its size whose compute and synchronization interleave with its own (CrossoverScheduler, Luo et al.,
arXiv 2103.07974; the paired period, slowdowns and memory rule: :mod:`plait.cost.crossover`).

Pairing rule (the paper's own was not read here: this one is plait's). In queue order, a job starts on free GPUs
where it fits (as :class:`plait.schedule.policies.Fifo`); where it does not, it is paired with the running unpaired
job of the same GPU count whose pair has the largest predicted gain, provided both jobs fit each GPU together and the
gain is at least :attr:`Crossover.min_gain`; else it waits, and so does every job behind it (strict FIFO). While
paired, each job trains at its solo speed on that placement over its predicted slowdown; when one completes, the
other trains alone at its solo speed and holds the GPUs. Pairs are never split before (no job moves or is stopped).

Each job's compute and exposed-synchronization phases come from the planner's best plan for it on that placement
(:attr:`plait.schedule.speed.Speed.split`); a speed model that gives none (a test's closed-form speeds) pairs
nothing, and the policy is FIFO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from plait.cost.crossover import PairCost, pair_cost
from plait.schedule.pairing import Pairing
from plait.schedule.pool import Placement, Pool
from plait.schedule.result import ScheduleResult, Segment
from plait.schedule.simulate import COMPLETE, Policy, Simulator
from plait.schedule.speed import Speed, SpeedModel
from plait.schedule.state import JobState
from plait.schedule.trace import TraceJob

HostKey = tuple[str, tuple[int, ...]]
"""A running job's (model, tier spans of its placement): jobs with one key pair alike."""


class SharingSimulator(Simulator):
    """The simulator with one more primitive, :meth:`share`: a waiting job starts on a running job's GPUs."""

    def __init__(self, jobs: tuple[TraceJob, ...], pool: Pool, speed: SpeedModel, policy: Policy) -> None:
        super().__init__(jobs, pool, speed, policy)
        self.partner: dict[int, int] = {}
        """Trace position -> its partner's, both ways, while paired."""
        self.pairs: list[Pairing] = []
        """Every pairing made, in order."""
        self.hosts: dict[int, dict[HostKey, dict[int, None]]] = {}
        """GPUs -> key -> the running unpaired jobs of that size and key, in the order they became so."""
        self._keys: dict[int, HostKey] = {}
        self._pair_memo: dict[tuple[str, int, HostKey], tuple[PairCost, Speed] | None] = {}
        """(guest model, GPUs, host key) -> :meth:`pair_of`'s answer (a pass may ask it for every key)."""

    # --- the running unpaired jobs, by size and key ---------------------------------------------------------------
    def _add_host(self, st: JobState) -> None:
        assert st.place is not None
        key = (st.job.model, self.pool.spans(st.place))
        self._keys[st.index] = key
        self.hosts.setdefault(st.place.gpus, {}).setdefault(key, {})[st.index] = None

    def _drop_host(self, st: JobState) -> None:
        key = self._keys.pop(st.index, None)
        if key is not None:
            by_key = self.hosts[st.gpus]
            del by_key[key][st.index]
            if not by_key[key]:
                del by_key[key]

    def start(self, st: JobState, place: Placement, now_s: float) -> None:
        super().start(st, place, now_s)
        self._add_host(st)

    # --- sharing -------------------------------------------------------------------------------------------------
    def share(self, guest: JobState, host: JobState, now_s: float) -> None:
        """Start waiting ``guest`` on running unpaired ``host``'s GPUs, both slowed as :meth:`pair_of` predicts
        (the caller checked that the pair fits and gains enough)."""
        assert host.place is not None and host.speed is not None and host.index not in self.partner
        found = self.pair_of(guest, host)
        assert found is not None, "share a pair pair_of accepts"
        cost, guest_solo = found
        self._drop_host(host)
        self._retime(host, replace(host.speed, tokens_per_s=host.speed.tokens_per_s / cost.slowdown_a), now_s)
        self._dequeue(guest)
        guest.settle(now_s)
        guest.status, guest.place, guest.gpus = "running", host.place, host.place.gpus
        guest.training_from_s = now_s + (guest_solo.restart_s if guest.ran_before else 0.0)
        guest.first_start_s = now_s if guest.first_start_s is None else guest.first_start_s
        guest.sizes.append(host.place.gpus)
        self.running[guest.index] = guest
        self._running_order.append(guest.index)
        self.partner[guest.index], self.partner[host.index] = host.index, guest.index
        self._retime(guest, replace(guest_solo, tokens_per_s=guest_solo.tokens_per_s / cost.slowdown_b), now_s)
        a, b = host.speed, guest_solo
        assert a.split is not None and b.split is not None
        self.pairs.append(Pairing(host_id=host.job.job_id, guest_id=guest.job.job_id, gpus=host.place.gpus,
                                  at_s=now_s, host_compute_s=a.split.compute_s, host_sync_s=a.split.sync_s,
                                  guest_compute_s=b.split.compute_s, guest_sync_s=b.split.sync_s,
                                  period_s=cost.period_s, host_slowdown=cost.slowdown_a,
                                  guest_slowdown=cost.slowdown_b, gain=cost.gain, bound=cost.bound))

    def solo_speed(self, st: JobState) -> Speed | None:
        """A running job's speed alone on its placement."""
        assert st.place is not None
        return self.speed_at(st, st.place.gpus, st.place)

    def pair_of(self, guest: JobState, host: JobState) -> tuple[PairCost, Speed] | None:
        """The pair's cost and the guest's solo speed on unpaired running ``host``'s placement (``None``: a phase
        split is unknown or the guest has no plan there), memoised by the guest's model and the host's size and key."""
        assert host.place is not None
        memo = (guest.job.model, host.place.gpus, self._keys[host.index])
        if memo not in self._pair_memo:
            self._pair_memo[memo] = self._pair(guest, host)
        return self._pair_memo[memo]

    def _pair(self, guest: JobState, host: JobState) -> tuple[PairCost, Speed] | None:
        assert host.place is not None
        solo_host, solo_guest = self.solo_speed(host), self.speed_at(guest, host.place.gpus, host.place)
        if solo_host is None or solo_guest is None or solo_host.split is None or solo_guest.split is None:
            return None
        return pair_cost(solo_host.split, solo_guest.split), solo_guest

    def _retime(self, st: JobState, speed: Speed, now_s: float) -> None:
        """Run ``st`` at ``speed`` from ``now_s`` (its completion moves)."""
        st.settle(now_s)
        st.speed, st.version = speed, st.version + 1
        self.columns.write(st)
        version = st.version
        self.kernel.at(st.finish_at(), lambda: self._complete(st, version), COMPLETE)

    def _release(self, st: JobState, now_s: float) -> None:
        other = self.partner.pop(st.index, None)
        if other is None:
            self._drop_host(st)
            super()._release(st, now_s)
            return
        assert st.status == "running", "a paired job leaves its GPUs only by completing"
        mate = self.states[other]
        del self.partner[other]
        if st.index in self._opened:  # it held the GPUs: they pass to its partner, not to the pool
            start = self._opened.pop(st.index)
            assert st.place is not None
            for node, gpus in st.place.nodes:
                self._segments.append(Segment(job_id=st.job.job_id, node=node, gpus=gpus, start_s=start, end_s=now_s))
            self._opened[other] = now_s
        del self.running[st.index]
        self._running_order.remove(st.index)
        st.place, st.speed, st.version, st.gpus = None, None, st.version + 1, 0
        solo = self.solo_speed(mate)
        assert solo is not None, "a paired job has a plan on its placement"
        self._retime(mate, solo, now_s)
        self._add_host(mate)

    def run(self, progress: Callable[[int, int], None] | None = None) -> ScheduleResult:
        """As :meth:`Simulator.run`, with the pairs made."""
        return replace(super().run(progress), pairs=tuple(self.pairs))


@dataclass(frozen=True, kw_only=True)
class Crossover:
    """FIFO, pairing a job that does not fit the free GPUs with a running job of its size (module docstring)."""

    min_gain: float = 0.05
    """Least predicted gain a pair must have (assumed: below 5% more steps per GPU-second than running the two one
    after the other, a pair is mostly time-slicing, which nearly doubles the host's step for little work gained)."""
    name: str = "crossover"
    """Policy name."""
    simulator: type[SharingSimulator] = SharingSimulator
    """The simulator that lets jobs share GPUs."""

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """In queue order: start on free GPUs, else pair with the best partner, else wait (head of line)."""
        assert isinstance(sim, SharingSimulator)
        for st in sim.queued_in_order():
            place = sim.pool.packed(st.job.gpus) if st.job.gpus <= sim.pool.free_gpus else None
            if place is not None:
                sim.start(st, place, now_s)
                continue
            host = self._partner(sim, st)
            if host is None:
                return
            sim.share(st, host, now_s)

    def _partner(self, sim: SharingSimulator, st: JobState) -> JobState | None:
        """The running unpaired job of ``st``'s size whose pair with it fits and gains most (at least
        :attr:`min_gain`); of equal gains, the key seen first, and in it the job unpaired longest."""
        best, best_gain = None, self.min_gain
        for members in sim.hosts.get(st.job.gpus, {}).values():
            host = sim.states[next(iter(members))]  # every member of a key pairs alike
            found = sim.pair_of(st, host)
            if found is not None and found[0].fits and found[0].gain >= best_gain:
                if best is None or found[0].gain > best_gain:
                    best, best_gain = host, found[0].gain
        return best
