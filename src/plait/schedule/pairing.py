"""One pair of jobs time-sharing the same GPUs under the crossover policy, as the scheduler reports it."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, kw_only=True)
class Pairing:
    """Two jobs paired on one placement, with the figures the cost model predicts for them
    (:func:`plait.cost.crossover.pair_cost`)."""

    host_id: str
    """The running job whose GPUs are shared."""
    guest_id: str
    """The waiting job started on them."""
    gpus: int
    """GPUs each of the two uses (the same ones)."""
    at_s: float
    """When they were paired."""
    host_compute_s: float
    """Host's compute phase per step."""
    host_sync_s: float
    """Host's exposed gradient synchronization per step."""
    guest_compute_s: float
    """Guest's compute phase per step."""
    guest_sync_s: float
    """Guest's exposed gradient synchronization per step."""
    period_s: float
    """Seconds in which each makes one step while paired."""
    host_slowdown: float
    """Host's step paired over alone."""
    guest_slowdown: float
    """Guest's step paired over alone."""
    gain: float
    """Steps of both per second paired over one after the other on the same GPUs, less 1."""
    bound: str
    """What sets the period: ``gpu``, ``a`` (the host's step), ``b`` (the guest's) or ``link``."""

    def as_dict(self) -> dict[str, float | int | str]:
        """The fields by name (``plait schedule --json``)."""
        return asdict(self)
