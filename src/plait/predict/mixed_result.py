"""What a mixed-cluster estimate says (:func:`plait.predict.mixed.estimate_mixed`): each group's part of the step,
the step, throughput, MFU and money, and their JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from plait.cost.estimate import TimeBreakdown
from plait.hardware.mixed import MixedCluster
from plait.plan.mixed import MixedPlan


@dataclass(frozen=True, kw_only=True)
class GroupTime:
    """One group's (``data``) or one stage's (``pipeline``) part of a mixed step."""

    group: str
    """Device group."""
    accelerator: str
    """Its device."""
    num_gpus: int
    """Its devices in the plan."""
    work: str
    """What it runs: ``b64`` (sequences per step) or ``12 layers``."""
    busy_s: float
    """Seconds of the step it works (its own step time; a stage's compute and reduction)."""
    idle_s: float
    """Seconds it waits for the slowest member."""
    memory_bytes: float
    """Peak bytes on one of its devices."""
    capacity_bytes: float
    """Device memory of one of its devices."""
    precision: str
    """The precision its matmuls run in: the plan's, or the 16-bit type its device has
    (:meth:`plait.hardware.accelerator.Accelerator.arithmetic`)."""

    @property
    def fits(self) -> bool:
        """Whether its peak fits its device memory."""
        return self.memory_bytes <= self.capacity_bytes


@dataclass(frozen=True, kw_only=True)
class MixedEstimate:
    """Prediction for one mixed plan."""

    model_name: str
    """Model display name."""
    cluster_name: str
    """Mixed cluster display name."""
    plan: MixedPlan
    """The plan estimated."""
    step_time_s: float
    """One synchronous step (one averaging round with ``local_sgd``)."""
    tokens_per_step: int
    """Tokens that step trains on."""
    groups: tuple[GroupTime, ...]
    """Each group (data split) or stage (pipeline split)."""
    time: TimeBreakdown
    """The critical member's breakdown."""
    model_flops_per_token: float
    """PaLM-convention model FLOPs per token (as :class:`plait.cost.estimate.Estimate`)."""
    peak_flops: float
    """Sum of the dense bf16 (plan precision) peaks of every device used."""
    price_per_hour_usd: float
    """Hourly price of every device used."""
    steps_multiplier: float = 1.0
    """Steps the plan's synchronization needs per all-reduce step (:mod:`plait.plan.convergence`); with per-group
    local steps, the multiplier of the group that drifts most (the most local steps): conservative, as no
    measured multiplier of uneven local steps exists."""
    steps_multiplier_known: bool = True
    """Whether every group's multiplier has a figure (``False``: 1 is used and the ranking cannot trust it)."""

    @property
    def critical(self) -> GroupTime:
        """The member that sets the step (least idle)."""
        return min(self.groups, key=lambda g: g.idle_s)

    @property
    def fits(self) -> bool:
        """Whether every member fits its device memory."""
        return all(g.fits for g in self.groups)

    @property
    def tokens_per_s(self) -> float:
        """Training throughput."""
        return self.tokens_per_step / self.step_time_s

    @property
    def target_tokens_per_s(self) -> float:
        """Throughput in all-reduce-equivalent tokens (what ranks plans)."""
        return self.tokens_per_s / self.steps_multiplier

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation against the summed peaks of the mixed devices."""
        return self.model_flops_per_token * self.tokens_per_s / self.peak_flops

    @property
    def usd_per_million_tokens(self) -> float:
        """Money per million all-reduce-equivalent tokens at the devices' hourly prices."""
        return self.price_per_hour_usd / 3600.0 / (self.tokens_per_s / self.steps_multiplier) * 1e6


def mixed_price(cluster: MixedCluster, mixed: MixedPlan) -> float:
    """The devices' hourly price of the GPUs ``mixed`` uses."""
    return sum(s.num_gpus * cluster.group(s.group).cluster.price_per_gpu_hour_usd for s in mixed.shares)


def mixed_to_dict(est: MixedEstimate, train_tokens: float | None = None) -> dict[str, object]:
    """A JSON-ready summary of ``est``."""
    out: dict[str, object] = {
        "model": est.model_name, "cluster": est.cluster_name, "layout": est.plan.describe(), "split": est.plan.split,
        "plan": est.plan.plan.to_dict(), "num_gpus": est.plan.num_gpus, "step_time_s": est.step_time_s,
        "tokens_per_step": est.tokens_per_step, "tokens_per_s": est.tokens_per_s, "mfu": est.mfu, "fits": est.fits,
        "price_per_hour_usd": est.price_per_hour_usd, "usd_per_million_tokens": est.usd_per_million_tokens,
        "steps_multiplier": est.steps_multiplier, "steps_multiplier_known": est.steps_multiplier_known,
        "critical": est.critical.group,
        "time_breakdown_s": dict(est.time.items()),
        "groups": [{**asdict(g), "fits": g.fits} for g in est.groups],
    }
    if train_tokens:
        seconds = train_tokens * est.steps_multiplier / est.tokens_per_s
        out["train"] = {"tokens": train_tokens, "time_s": seconds,
                        "cost_usd": seconds / 3600.0 * est.price_per_hour_usd}
    return out
