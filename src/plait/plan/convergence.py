"""Steps multipliers: how many more steps a synchronization method needs to reach the loss the all-reduce reaches.

A method that changes the update (compression, infrequent averaging) changes how many steps reach a given loss. Its
multiplier is ``steps the method needs / steps the all-reduce needs`` for the same loss, and time-to-target is
``steps x multiplier x step time``. Each figure carries its provenance (``data/convergence.toml``): a cited paper
result (table and setting) or a ``plait converge`` measurement (:func:`matching_multiplier`). A method with no
figure has no multiplier: estimates say so, and the planner's default search leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

from plait.packaged import packaged_toml
from plait.sync import SyncMethod, parse


@dataclass(frozen=True)
class Convergence:
    """The steps multiplier of one method, with where it comes from."""

    multiplier: float | None
    """Steps the method needs over steps the all-reduce needs for the same loss (``None``: unknown)."""
    source: str
    """The paper figure or the ``plait converge`` command behind it."""
    basis: str = "unknown"
    """``definition``, ``cited``, ``measured`` or ``derived`` (a bound scaling a measured figure:
    :mod:`plait.plan.async_convergence`, :mod:`plait.plan.gossip_convergence`)."""

    @property
    def known(self) -> bool:
        """Whether a figure exists."""
        return self.multiplier is not None

    @property
    def factor(self) -> float:
        """The multiplier, 1 where unknown (what time-to-target uses; the estimate says it is unknown)."""
        return 1.0 if self.multiplier is None else self.multiplier


@dataclass(frozen=True)
class _Entry:
    figure: Convergence
    replicas: int | None
    """The largest number of averaging replicas the figure holds for (``None``: any)."""
    any_parameters: bool = False
    """The figure holds for every spec of its method (an exact method whatever its parameters)."""
    searched: bool = True
    """The planner's default grid tries the spec (``searched = false``: a variant it tries only when asked by
    ``--dp-sync``, keeping the grid within :data:`plait.search.request.MAX_SYNCS`)."""


@cache
def table() -> dict[str, list[_Entry]]:
    """Canonical spec -> its figures in ``data/convergence.toml`` order."""
    return _table_of(None)


@cache
def _table_of(name: str | None) -> dict[str, list[_Entry]]:
    """:func:`table`'s entries of the method called ``name`` (``None``: every method), parsing only their specs: a
    method's module loads when a spec names it (:mod:`plait.sync.registry`), and an all-reduce names no other."""
    raw = packaged_toml("plait.plan", "data", "convergence.toml")
    out: dict[str, list[_Entry]] = {}
    for entry in raw["entry"]:
        if name is not None and entry["spec"].partition(":")[0].strip() != name:
            continue
        figure = Convergence(float(entry["multiplier"]), entry["source"], entry["basis"])
        key = entry["spec"] if entry.get("any_parameters") else parse(entry["spec"]).spec
        out.setdefault(key, []).append(_Entry(figure, entry.get("replicas"), bool(entry.get("any_parameters")),
                                              bool(entry.get("searched", True))))
    return out


@lru_cache(maxsize=512)
def convergence(method: SyncMethod, replicas: int = 2) -> Convergence:
    """The figure for ``method`` with ``replicas`` averaging replicas: the first entry
    whose setting had at least as many (more replicas drifting apart converge worse: Charles et al. 2025,
    arXiv 2503.09799, Table 4, DiLoCo's loss grows with M at every model size; Ortiz et al. 2021). Kept per
    (method, replicas): frozen values, and every estimate asks."""
    spec = method.spec
    if method.asynchronous and replicas <= 1:
        return Convergence(1.0, "one worker: every update is fresh, sequential SGD (staleness 0)", "definition")
    for entry in (*_table_of(method.name).get(spec, ()), *_table_of(method.name).get(method.name, ())):
        if entry.replicas is None or replicas <= entry.replicas:
            return entry.figure
    if method.graph() is not None:  # gossip: scaled from the measured four-replica figure by the consensus rates
        from plait.plan.gossip_convergence import derived_multiplier as gossip_multiplier  # gossip only

        multiplier, source = gossip_multiplier(method, replicas, _measured())
        if multiplier is not None:
            return Convergence(multiplier, source, "derived")
    proxy = method.convergence_proxy
    if proxy is not None:
        figure = convergence(proxy, replicas)
        if figure.known:
            return Convergence(figure.multiplier, f"{proxy.spec}'s figure, taken for {spec} "
                                                  f"(plait.sync.{type(method).__name__}.convergence_proxy): "
                                                  f"{figure.source}", figure.basis)
    if method.asynchronous:  # scaled from the measured two-replica figures by the asynchronous-SGD bound
        from plait.plan.async_convergence import derived_multiplier  # asynchronous methods only

        multiplier, source = derived_multiplier(method, replicas, _measured())
        return Convergence(multiplier, source, "derived" if multiplier is not None else "unknown")
    return Convergence(None, f"no figure for {spec} with {replicas} replicas (measure one: plait converge "
                             f"--dp-sync {spec} --ranks {replicas})")


@cache
def _measured() -> dict[str, list[tuple[float, int | None, str]]]:
    """Spec -> (multiplier, replicas, source) of the table's measured figures."""
    return {spec: [(e.figure.factor, e.replicas, e.figure.source) for e in entries if e.figure.basis == "measured"]
            for spec, entries in table().items() if not entries[0].any_parameters}


def averaging_replicas(dp: int, dp_replicate: int, sharding: str) -> int:
    """Replicas that train apart under a method: every data-parallel rank, or HSDP's replicas when sharded."""
    return dp if sharding == "none" else dp_replicate


def known_specs(replicas: int = 2) -> tuple[str, ...]:
    """Specs with a figure at ``replicas`` replicas, in the table's order."""
    return tuple(spec for spec, entries in table().items()
                 if not entries[0].any_parameters and convergence(parse(spec), replicas).known)


def matching_multiplier(method: list[float], reference: list[float], window: int) -> tuple[float, float | None]:
    """(multiplier, reference step that matches) from two loss curves over the same batches.

    The method's loss is the mean of its last ``window`` steps, centred at step ``n - (window - 1) / 2`` (steps
    counted from 1); the reference's running mean over the same window first reaches it at centre ``c``; the
    multiplier is ``(n - (window - 1) / 2) / c``. If the reference never gets as low within its ``n`` steps, the
    method is at least as good: the multiplier is taken as 1 (not below: a lower loss in ``n`` steps of a small
    model is not claimed to carry over) and the step is ``None``."""
    n = len(method)
    if not 1 <= window <= n or len(reference) < n:
        raise ValueError(f"window={window} must be in [1, {n}] and the reference needs >= {n} steps")
    target = sum(method[-window:]) / window
    half = (window - 1) / 2
    running = sum(reference[:window])
    for end in range(window, n + 1):
        if end > window:
            running += reference[end - 1] - reference[end - 1 - window]
        if running / window <= target:
            centre = end - half
            return max(1.0, (n - half) / centre), centre
    return 1.0, None


NUMERICAL = ("allreduce", "bf16", "fp16")
"""Methods the planner's default grid leaves out: the reference, and 16-bit gradient all-reduces, which are a
numerical choice like ``grad_reduce_dtype`` (fp32 unless the user asks)."""


def searched_specs() -> tuple[SyncMethod, ...]:
    """The planner's default grid of ``dp_sync`` methods: every spec with a figure, less :data:`NUMERICAL`, the
    entries marked ``searched = false`` and the per-tier methods (tried where sites are joined, at their tier's ratio: :mod:`plait.search.adaptive`)."""
    return tuple(parse(spec) for spec, entries in table().items()
                 if parse(spec).name not in NUMERICAL and not parse(spec).site_aware and any(e.figure.known and not e.any_parameters
                                                              and e.searched for e in entries))
