"""A federated training job's description: clients, who takes part in a round, the model split into a shared body
and a personal head, the clients' device and link, their stragglers, and the method that trains it.

Two methods:

- ``pflego`` (Nikoloutsopoulos, Koutsopoulos & Titsias, "Personalized Federated Learning with Exact Stochastic
  Gradient Descent", arXiv 2202.09848): a selected client runs ``local_steps - 1`` full-batch gradient steps on its
  personal head only (the shared body fixed, so its features are computed once), then one joint step whose body
  gradient it sends; the server steps the body by the unbiased sum of those gradients: an exact SGD step over all
  weights (abstract; as the authors' code does it, sotirisnik/PFLEGO ``main.py``).
- ``fedavg`` (McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data", AISTATS
  2017, arXiv 1602.05629, Algorithm 1): a selected client runs ``local_steps`` SGD steps on the whole model from the
  server's weights and sends its weights back; the server averages them, weighted by the clients' samples.

A TOML file with a ``[federated]`` table describes it (``examples/federated-toy.toml``); read by
:func:`read_federated` through the strict schema.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from plait.errors import ConfigError
from plait.hardware.figure import Figure
from plait.schema import build, check_keys, table, value
from plait.workload.files import read_toml

Method = Literal["pflego", "fedavg"]
METHODS: tuple[Method, ...] = ("pflego", "fedavg")


@dataclass(frozen=True, kw_only=True)
class Federation:
    """Who trains, how often and how much per round."""

    method: Method
    """``pflego`` or ``fedavg`` (module docstring)."""
    clients: int
    """Clients in the federation (``I`` in PFLEGO)."""
    participation: float
    """Fraction of the clients the server selects each round, uniformly at random (PFLEGO's ``r / I``, FedAvg's
    ``C``), in (0, 1]."""
    local_steps: int
    """Steps a selected client takes per round (PFLEGO's ``tau``: ``tau - 1`` head steps and one joint step;
    FedAvg's local SGD steps)."""
    samples_per_client: int
    """Training samples each client holds (``N_i``, equal for all)."""
    batch: int
    """Samples per local step (``samples_per_client``: full-batch steps, as PFLEGO's)."""
    bytes_per_value: int = 4
    """Bytes of one weight or gradient value on the link (4: fp32)."""


@dataclass(frozen=True, kw_only=True)
class MlpSplit:
    """A multilayer perceptron: the shared body (``theta``) and the personal head (``W_i``, one linear map)."""

    inputs: int
    """Input features."""
    body: tuple[int, ...]
    """Widths of the body's hidden layers (each a linear map with a bias and a ReLU)."""
    classes: int
    """Outputs of the head (a linear map with a bias from the body's last width)."""


@dataclass(frozen=True, kw_only=True)
class Link:
    """A client's network link to the server."""

    uplink_bytes_per_s: Figure
    """Client to server."""
    downlink_bytes_per_s: Figure
    """Server to client."""
    latency_s: Figure
    """One-way latency of one message."""


@dataclass(frozen=True, kw_only=True)
class ClientDevice:
    """What one client computes on."""

    accelerator: str
    """A catalog accelerator (``plait accelerators``): its peak and rated power."""
    dtype: str
    """The precision of the client's arithmetic (a key of the accelerator's peaks)."""
    efficiency: Figure
    """Fraction of the peak the client's small matmuls reach."""
    link: Link
    """Its link to the server."""


@dataclass(frozen=True, kw_only=True)
class Stragglers:
    """How much slower than the median client a client is: a log-normal factor of median 1."""

    sigma: Figure
    """Standard deviation of the factor's logarithm (0: every client is the median client)."""
    deadline_s: float = 0.0
    """Seconds the server waits for a round's clients; the ones not done are dropped (0: wait for all)."""


@dataclass(frozen=True, kw_only=True)
class PlanSpace:
    """What ``plait plan`` chooses among."""

    local_steps: tuple[int, ...]
    """Local steps to try."""
    participation: tuple[float, ...]
    """Participation fractions to try."""
    methods: tuple[Method, ...] = METHODS
    """Methods to try."""


@dataclass(frozen=True, kw_only=True)
class RoundsToLoss:
    """A measured multiplier: rounds a method takes to reach a loss at one setting."""

    method: Method
    """The method."""
    local_steps: int
    """Its local steps."""
    participation: float
    """Its participation fraction."""
    rounds: int
    """Rounds until the clients' objective first fell to ``target_loss``."""
    target_loss: float
    """The loss."""
    source: str
    """``measured by <command> on <date>`` (and on which model), or ``assumed: <why>``."""


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """``plait run``'s toy federation on gloo ranks (one server rank, one rank per client)."""

    clients: int = 3
    """Client ranks (2-7)."""
    lr: float = 0.1
    """Step size of the shared weights (PFLEGO's server step; FedAvg's local steps)."""
    head_lr: float = 0.1
    """Step size of PFLEGO's head steps before the joint step (the joint step takes ``lr x I / r``)."""
    participation: float = 1.0
    """Fraction of the client ranks selected per round (PFLEGO's applied gradient equals the objective's only at 1)."""
    target_loss: float = 0.5
    """The clients' objective whose first round is reported."""
    seed: int = 0
    """Seeds the data, the weights and the selection of clients."""


@dataclass(frozen=True, kw_only=True)
class FederatedSpec:
    """A federated job (module docstring)."""

    name: str
    """How reports name it."""
    federation: Federation
    """Clients and rounds."""
    model: MlpSplit
    """The network."""
    client: ClientDevice
    """The clients' device and link."""
    stragglers: Stragglers
    """Their spread."""
    plan: PlanSpace
    """``plait plan``'s choices."""
    rounds_to_loss: tuple[RoundsToLoss, ...] = ()
    """Measured multipliers."""
    run: RunSettings = RunSettings()
    """``plait run``'s toy."""


def is_federated_data(data: dict[str, object]) -> bool:
    """A TOML's tables describe a federated job (it has ``[federated]``)."""
    return "federated" in data


MAX_CLIENTS = 10**9
"""Most clients a federation may name (assumed: cross-device federations reach hundreds of millions of phones;
past 1e9 the straggler quantile ``m / (m + 1)`` of :func:`plait.workloads.federated.cost.slowest_factor` rounds to 1
in a float)."""
MAX_SIGMA = 10.0
"""Largest straggler spread (assumed: sigma 10 puts the 90th-percentile client 3.6e5 x the median's time, far past
any measured fleet; the slowest-of-``m`` factor ``exp(sigma z)`` then stays finite for every ``m`` allowed)."""
SECTIONS = ("name", "federated", "model", "client", "stragglers", "plan", "rounds_to_loss", "run")


def read_federated(path: Path) -> FederatedSpec:
    """The federated job a TOML file describes (strict: unknown keys, missing keys and wrong types name the key)."""
    data = read_toml(path)
    where = str(path)
    check_keys(data, SECTIONS, where)
    for key in ("federated", "model", "client", "stragglers", "plan"):
        if key not in data:
            raise ConfigError(f"{where}: a federated job needs [{key}]")
    raw_runs = data.get("rounds_to_loss", [])
    if not isinstance(raw_runs, list):
        raise ConfigError(f"{where}: rounds_to_loss must be a list of tables ([[rounds_to_loss]])")
    spec = FederatedSpec(
        name=value(data.get("name", path.stem), str, f"{where}: name"),
        federation=build(Federation, table(data["federated"], f"{where}: [federated]"), f"{where}: [federated]"),
        model=build(MlpSplit, table(data["model"], f"{where}: [model]"), f"{where}: [model]"),
        client=build(ClientDevice, table(data["client"], f"{where}: [client]"), f"{where}: [client]"),
        stragglers=build(Stragglers, table(data["stragglers"], f"{where}: [stragglers]"), f"{where}: [stragglers]"),
        plan=build(PlanSpace, table(data["plan"], f"{where}: [plan]"), f"{where}: [plan]"),
        rounds_to_loss=tuple(build(RoundsToLoss, table(r, f"{where}: rounds_to_loss[{i}]"),
                                   f"{where}: rounds_to_loss[{i}]") for i, r in enumerate(raw_runs)),
        run=build(RunSettings, table(data.get("run", {}), f"{where}: [run]"), f"{where}: [run]"))
    check_federated(spec, where)
    return spec


def check_federated(spec: FederatedSpec, where: str) -> None:
    """Refuse what no federation can be (one line naming the value and the rule)."""
    f, m = spec.federation, spec.model
    _positive(where, "[federated]", {"clients": f.clients, "local_steps": f.local_steps, "batch": f.batch,
                                     "samples_per_client": f.samples_per_client, "bytes_per_value": f.bytes_per_value})
    _positive(where, "[model]", {"inputs": m.inputs, "classes": m.classes} | {f"body[{i}]": w for i, w in
                                                                               enumerate(m.body)})
    if not m.body:
        raise ConfigError(f"{where}: [model].body=[] must list at least one hidden width (the shared weights)")
    if f.batch > f.samples_per_client:
        raise ConfigError(f"{where}: [federated].batch={f.batch} must be <= samples_per_client={f.samples_per_client}")
    for p in (f.participation, spec.run.participation, *spec.plan.participation):
        if not 0.0 < p <= 1.0:
            raise ConfigError(f"{where}: participation={p} must be a fraction in (0, 1]")
    for tau in spec.plan.local_steps:
        if tau <= 0:
            raise ConfigError(f"{where}: [plan].local_steps has {tau}: must be >= 1")
    if not spec.plan.local_steps or not spec.plan.participation or not spec.plan.methods:
        raise ConfigError(f"{where}: [plan] needs at least one local_steps, participation and method")
    if f.clients > MAX_CLIENTS:
        raise ConfigError(f"{where}: [federated].clients={f.clients} must be <= {MAX_CLIENTS:.0e}")
    if not 0 <= spec.stragglers.sigma.value <= MAX_SIGMA or spec.stragglers.deadline_s < 0:
        raise ConfigError(f"{where}: [stragglers] sigma={spec.stragglers.sigma.value} must be in 0..{MAX_SIGMA:g} "
                          f"and deadline_s={spec.stragglers.deadline_s} >= 0")
    link = spec.client.link
    for name in ("uplink_bytes_per_s", "downlink_bytes_per_s"):
        if getattr(link, name).value <= 0:
            raise ConfigError(f"{where}: [client.link].{name}={getattr(link, name).value} must be > 0")
    if link.latency_s.value < 0:
        raise ConfigError(f"{where}: [client.link].latency_s={link.latency_s.value} must be >= 0")
    if not 0 < spec.client.efficiency.value <= 1:
        raise ConfigError(f"{where}: [client].efficiency={spec.client.efficiency.value} must be a fraction in (0, 1]")
    if not 2 <= spec.run.clients <= 7:
        raise ConfigError(f"{where}: [run].clients={spec.run.clients} must be 2-7 (one CPU rank each)")
    for name in ("lr", "head_lr"):
        step = getattr(spec.run, name)
        if not 0 < step < math.inf:
            raise ConfigError(f"{where}: [run].{name}={step} must be a finite step size > 0")
    if not math.isfinite(spec.run.target_loss):
        raise ConfigError(f"{where}: [run].target_loss={spec.run.target_loss} must be finite")
    for r in spec.rounds_to_loss:
        if r.rounds <= 0 or not 0 < r.participation <= 1 or r.local_steps <= 0:
            raise ConfigError(f"{where}: rounds_to_loss of {r.method} needs rounds and local_steps >= 1 and "
                              f"participation in (0, 1]")


def _positive(where: str, section: str, values: dict[str, int]) -> None:
    for name, v in values.items():
        if v <= 0:
            raise ConfigError(f"{where}: {section}.{name}={v} must be > 0")
