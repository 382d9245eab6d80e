"""Joules of one optimizer step from its time breakdown and the cluster's power per device state.

Each GPU's draw is taken as constant within a state of the step's critical path (busy computing, communicating,
idle), so its energy is the integral of a piecewise-constant power: ``sum_s P_s t_s``. Every GPU also carries its
share of the host and of the network for the whole step, and the data centre multiplies the IT energy by its power
usage effectiveness (PUE = facility energy / IT energy; The Green Grid, White Paper 49, "PUE: A Comprehensive
Examination of the Metric", 2012):

    E_step = PUE x N_gpus x (P_busy t_busy + P_comm t_comm + P_idle t_idle + (P_host + P_network) t_step)

Assumptions: every GPU spends the step in the states of the critical path's stage (the most loaded pipeline stage;
lighter stages wait more, at idle power, so the busy share is an upper bound for them); collectives that overlap
compute are drawn at the busy power of the compute they hide behind. The power figures and their sources are
:class:`plait.hardware.power_states.PowerStates` (``power.toml``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

    from plait.cost.estimate import TimeBreakdown
    from plait.hardware.power_states import PowerStates

State = Literal["busy", "communicating", "idle"]

STATE_OF: dict[str, State] = {
    "compute_s": "busy", "recompute_s": "busy", "optimizer_s": "busy",
    "tp_comm_s": "communicating", "cp_comm_s": "communicating", "ep_comm_s": "communicating",
    "pp_p2p_s": "communicating", "fsdp_comm_s": "communicating", "swap_s": "communicating",
    "dp_comm_s": "communicating",
    "host_s": "idle", "pp_bubble_s": "idle", "input_wait_s": "idle",
}
"""The device state of each step-time component (a test checks every component has one)."""


@dataclass(frozen=True, kw_only=True)
class StepEnergy:
    """Energy of one optimizer step of the whole job, joules, and the state times it comes from."""

    busy_s: float
    """Seconds of the step a GPU computes."""
    communicating_s: float
    """Seconds of the step a GPU waits on exposed communication."""
    idle_s: float
    """Seconds of the step a GPU idles (bubbles, host, input)."""
    gpu_j: float
    """Energy of the GPU boards, all GPUs, before PUE."""
    host_j: float
    """Energy of the GPUs' hosts, before PUE."""
    network_j: float
    """Energy of the scale-out network, before PUE."""
    pue: float
    """The data centre's power usage effectiveness."""

    @property
    def it_j(self) -> float:
        """Energy of the IT equipment (GPUs, hosts, network)."""
        return self.gpu_j + self.host_j + self.network_j

    @property
    def total_j(self) -> float:
        """Energy the data centre draws for the step: IT energy x PUE."""
        return self.it_j * self.pue

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready summary."""
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"it_j": self.it_j, "total_j": self.total_j}


def state_seconds(time: TimeBreakdown) -> dict[State, float]:
    """Seconds of the step in each device state (:data:`STATE_OF`)."""
    out: dict[State, float] = {"busy": 0.0, "communicating": 0.0, "idle": 0.0}
    for name, state in STATE_OF.items():
        out[state] += getattr(time, name)
    return out


def step_energy(time: TimeBreakdown, num_gpus: int, power: PowerStates) -> StepEnergy:
    """Energy of one step of ``num_gpus`` GPUs whose critical path is ``time`` (the module's formula)."""
    seconds = state_seconds(time)
    per_gpu = (power.busy_w.value * seconds["busy"] + power.communicating_w.value * seconds["communicating"]
               + power.idle_w.value * seconds["idle"])
    step_s = time.total_s
    return StepEnergy(busy_s=seconds["busy"], communicating_s=seconds["communicating"], idle_s=seconds["idle"],
                      gpu_j=num_gpus * per_gpu, host_j=num_gpus * power.host_w_per_gpu.value * step_s,
                      network_j=num_gpus * power.network_w_per_gpu.value * step_s, pue=power.pue.value)


def step_energy_batch(time: Mapping[str, np.ndarray], num_gpus: int, power: PowerStates) -> np.ndarray:
    """Total (data-centre) joules of one step of each candidate of a batch (:func:`step_energy` over arrays;
    ``time``: :attr:`plait.cost.batch.BatchResult.time`, components without their ``_s``)."""
    watts = {"busy": power.busy_w.value, "communicating": power.communicating_w.value, "idle": power.idle_w.value}
    share_w = power.host_w_per_gpu.value + power.network_w_per_gpu.value
    per_gpu = sum((watts[state] + share_w) * time[key] for name, state in STATE_OF.items()
                  if (key := name.removesuffix("_s")) in time)  # a batch has no input_wait: its loader is not costed
    return num_gpus * power.pue.value * per_gpu
