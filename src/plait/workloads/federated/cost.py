"""One federated round's cost: a client's compute, the bytes each way, the round's time and the clients' energy.

Per sample of a linear map of ``a x b`` multiply-adds (MACs), the forward pass costs ``2ab`` FLOPs, the weight
gradient ``2ab`` and the input gradient ``2ab`` (Kaplan et al., "Scaling Laws for Neural Language Models", arXiv
2001.08361, Sec. 2.1: forward ``2N``, backward ``4N`` per parameter); the first layer's input gradient is not needed
and not counted. Biases and ReLUs (``O(width)`` per sample: ``1 / (2 x fan-in)`` of a layer's forward, under 2% at
fan-ins >= 32) and the optimizer's update (``2`` FLOPs a value a step: ``1 / (3 x batch)`` of a step) are left out.

- PFLEGO (arXiv 2202.09848, abstract; the authors' code, sotirisnik/PFLEGO ``main.py``): ``tau - 1`` head steps
  (the head's forward and weight gradient: ``4 M_h``), then one joint step (the head's forward and both gradients,
  the body's backward: ``6 M_h + 2 M_b + 2 (M_b - M_1)``); the body's forward (``2 M_b``) once per round where the
  steps are full-batch (the body is fixed, its features are reused), else once per step. It downloads the body's
  weights and uploads one gradient of them.
- FedAvg (arXiv 1602.05629, Algorithm 1): ``tau`` SGD steps on the whole model; it downloads and uploads the whole
  model's weights.

A client's time is its compute at ``efficiency x peak`` plus its transfers (one latency and bytes over bandwidth
each way). Clients are slower than the median by a log-normal factor (``[stragglers]``) applied to their whole time
(assumed: a slow phone is slow at both); the round waits for the slowest of its ``m`` clients, whose factor is taken
at the quantile ``m / (m + 1)`` (the expected order statistic's approximation ``E[X_(m:m)] ~ F^-1(m / (m + 1))``:
David & Nagaraja, "Order Statistics", 3rd ed. 2003, Sec. 4.5). With a deadline ``D`` the round lasts at most ``D``
and a client's chance of finishing is ``P(s t < D) = Phi(ln(D / t) / sigma)``. The server's aggregation and its own
link are not costed (assumed: a data-centre server, not the bottleneck of a round of clients).

A client's energy is :func:`plait.cost.energy.step_energy` of its round (compute busy, transfers communicating) on
its device's power states (:func:`plait.hardware.power_states.default_power` of its rated power); only the board's
energy is a client's (the host, network and PUE shares there are a data centre's).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from statistics import NormalDist

from plait.cost.energy import step_energy
from plait.cost.estimate import TimeBreakdown
from plait.errors import ConfigError
from plait.hardware.catalog import get_accelerator
from plait.hardware.power_states import default_power
from plait.workloads.federated.model import FederatedSpec, Method, MlpSplit


class NoClientInTime(ConfigError):
    """No client finishes its round before the deadline."""


@dataclass(frozen=True, kw_only=True)
class Shapes:
    """Parameters and multiply-adds per sample of the model's two parts."""

    body_params: int
    """Shared weights and biases (``theta``)."""
    head_params: int
    """Personal weights and biases (``W_i``)."""
    body_macs: int
    """Multiply-adds of the body per sample."""
    head_macs: int
    """Multiply-adds of the head per sample."""
    first_macs: int
    """Multiply-adds of the body's first layer (its input gradient is not computed)."""


def shapes(model: MlpSplit) -> Shapes:
    """The MLP's counts (linear maps with biases: ``inputs -> body[0] -> ... -> body[-1] -> classes``)."""
    widths = (model.inputs, *model.body)
    body_macs = sum(a * b for a, b in zip(widths, widths[1:]))
    head_macs = widths[-1] * model.classes
    return Shapes(body_params=body_macs + sum(model.body), head_params=head_macs + model.classes,
                  body_macs=body_macs, head_macs=head_macs, first_macs=widths[0] * widths[1])


def client_flops(s: Shapes, method: Method, local_steps: int, batch: int, full_batch: bool) -> float:
    """FLOPs one selected client computes in a round (module docstring)."""
    if method == "fedavg":
        macs = s.body_macs + s.head_macs
        return local_steps * batch * (2 * macs + 2 * macs + 2 * (macs - s.first_macs))
    feature_passes = 1 if full_batch else local_steps
    head = (local_steps - 1) * 4 * s.head_macs + 6 * s.head_macs
    body_backward = 2 * s.body_macs + 2 * (s.body_macs - s.first_macs)
    return batch * (feature_passes * 2 * s.body_macs + head + body_backward)


def transfer_bytes(s: Shapes, method: Method, bytes_per_value: int) -> tuple[int, int]:
    """Bytes (down, up) per selected client per round: PFLEGO the body's weights down and their gradient up;
    FedAvg the whole model's weights both ways."""
    values = s.body_params if method == "pflego" else s.body_params + s.head_params
    return values * bytes_per_value, values * bytes_per_value


@dataclass(frozen=True, kw_only=True)
class RoundCost:
    """One round of a federated job (module docstring)."""

    method: Method
    """The method."""
    local_steps: int
    """Steps per selected client."""
    participation: float
    """Fraction of clients selected."""
    participants: int
    """Clients selected per round."""
    kept_fraction: float
    """Expected fraction of them that finish by the deadline (1 without one)."""
    client_flops: float
    """FLOPs of one client's round."""
    compute_s: float
    """The median client's compute."""
    download_bytes: int
    """Bytes the server sends each selected client."""
    upload_bytes: int
    """Bytes each selected client sends the server."""
    link_s: float
    """The median client's transfers, both ways with their latencies."""
    slowest_factor: float
    """The slowest selected client's time over the median's."""
    round_s: float
    """The round: the slowest selected client, or the deadline."""
    client_energy_j: float
    """Board energy of the median client's round."""
    round_energy_j: float
    """Board energy of all the round's selected clients (the median client's times their number; a client dropped
    at the deadline has computed until it, longer than the median: a lower bound there)."""

    @property
    def client_s(self) -> float:
        """The median client's round."""
        return self.compute_s + self.link_s

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return asdict(self) | {"client_s": self.client_s}


def participants(clients: int, participation: float) -> int:
    """Clients selected per round: ``participation x clients`` rounded, at least one (FedAvg's ``max(C K, 1)``)."""
    return max(1, round(participation * clients))


def slowest_factor(m: int, sigma: float) -> float:
    """The slowest of ``m`` log-normal factors of median 1 (module docstring: the ``m / (m + 1)`` quantile)."""
    return 1.0 if m == 1 or sigma == 0 else math.exp(sigma * NormalDist().inv_cdf(m / (m + 1)))


def round_cost(spec: FederatedSpec, method: Method | None = None, local_steps: int | None = None,
               participation: float | None = None) -> RoundCost:
    """The cost of one round of ``spec`` (its method, local steps and participation unless given)."""
    f = replace(spec.federation, **{k: v for k, v in (("method", method), ("local_steps", local_steps),
                                                       ("participation", participation)) if v is not None})
    s, device, link = shapes(spec.model), spec.client, spec.client.link
    accelerator = get_accelerator(device.accelerator)
    flops = client_flops(s, f.method, f.local_steps, f.batch, f.batch == f.samples_per_client)
    compute_s = flops / (accelerator.peak_flops(device.dtype) * device.efficiency.value)
    down, up = transfer_bytes(s, f.method, f.bytes_per_value)
    link_s = (2 * link.latency_s.value + down / link.downlink_bytes_per_s.value
              + up / link.uplink_bytes_per_s.value)
    m = participants(f.clients, f.participation)
    sigma, deadline = spec.stragglers.sigma.value, spec.stragglers.deadline_s
    factor = slowest_factor(m, sigma)
    client_s = compute_s + link_s
    round_s, kept = client_s * factor, 1.0
    if deadline > 0 and round_s > deadline:
        kept = _finish_chance(client_s, sigma, deadline)
        if kept == 0.0:
            raise NoClientInTime(f"[stragglers].deadline_s={deadline:g}: no client finishes a round of "
                              f"{client_s:.3g} s ({f.method}, {f.local_steps} local steps)")
        round_s = deadline
    power = default_power(accelerator.tdp_w)
    if power is None:
        raise ConfigError(f"[client].accelerator={device.accelerator!r} has no rated power (tdp_w) to cost energy")
    energy = step_energy(TimeBreakdown(compute_s=compute_s, dp_comm_s=link_s), 1, power).gpu_j
    return RoundCost(method=f.method, local_steps=f.local_steps, participation=f.participation, participants=m,
                     kept_fraction=kept, client_flops=flops, compute_s=compute_s, download_bytes=down,
                     upload_bytes=up, link_s=link_s, slowest_factor=factor, round_s=round_s,
                     client_energy_j=energy, round_energy_j=energy * m)


def _finish_chance(client_s: float, sigma: float, deadline_s: float) -> float:
    """``P(s t < D)`` for a log-normal ``s`` of median 1 (a point mass at 1 where ``sigma`` is 0)."""
    if sigma == 0:
        return 1.0 if client_s <= deadline_s else 0.0
    return NormalDist().cdf(math.log(deadline_s / client_s) / sigma)
