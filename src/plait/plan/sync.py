"""How data-parallel replicas synchronize: ``METHOD[:key=value,...]``.

``allreduce`` is today's dense gradient all-reduce every step. The others compress what each step sends or send
less often (docs/research/sync-methods.md says what PyTorch and torchft provide for each):

- ``bf16``, ``fp16``: the gradient all-reduced in 16 bits (PyTorch's ``bf16_compress_hook``/``fp16_compress_hook``);
- ``powersgd:rank=R[,min_compression_rate=C,start_iter=S]``: rank-R PowerSGD with error feedback (Vogels et al.
  2019, Algorithm 1; PyTorch's ``PowerSGDState`` defaults for C and S);
- ``topk:ratio=F``: the largest fraction F of each gradient with error feedback (Lin et al. 2018, DGC; 001-06);
- ``quantize:bits=8|4|1``: per-tensor quantization to the nearest of ``2^(b-1) - 1`` levels (1 bit: the scaled
  sign of EF-SignSGD, Karimireddy et al. 2019) with error feedback;
- ``local_sgd:every=H``: periodic model averaging every H steps (PyTorch's ``PeriodicModelAverager``);
- ``diloco:every=H,outer_lr=..,outer_momentum=..``: DiLoCo (Douillard et al. 2023), inner AdamW, outer Nesterov;
- ``dreamddp:every=H``: DreamDDP's partial local SGD (000-19; Tang et al., arXiv 2502.11058): each unit of layers
  averaged once per period, at its own step, overlapping the backward pass (:mod:`plait.plan.partial`);
- ``palsgd:every=H,p=..,eta=..,outer_lr=..,outer_momentum=..,warmup=W``: PALSGD (000-06; Naganuma et al., arXiv
  2504.18454): after W steps of plain data parallelism, DiLoCo in which each step is, with probability p, a
  pseudo-synchronization step instead of a gradient step — no forward, backward or communication, the replica
  pulled toward the last outer model;
- ``pipe_sgd`` (000-12): each step's all-reduce behind the next step's compute.

Other methods replace the all-reduce by other architectures:

- ``param_server:servers=S[,placement=balanced|layerwise][,host=ranks|cpu][,hybrid=true]``: sharded parameter
  servers (BytePS, Jiang et al. OSDI 2020; Poseidon, Zhang et al. ATC 2017): each replica pushes its gradient, a
  server shard sums it and steps its parameters, each replica pulls them back; tensors placed on servers by bytes
  (``balanced``: a flat split, as BytePS's partitions) or whole, per tensor, largest first onto the least-loaded
  server (``layerwise``: the per-layer placement of 001-17); servers on ``S`` of the training ranks or on CPU
  machines; ``hybrid=true``: Poseidon's hybrid communication, each linear layer's gradient broadcast as its
  sufficient factors to every peer instead wherever that moves fewer bytes (:mod:`plait.plan.factors`);
- ``switch_aggregation[:bits=32|16]``: in-network aggregation (SwitchML, Sapio et al. NSDI 2021; NVIDIA SHARP):
  each replica sends its gradient once, in fixed point, and receives the sum once;
- ``gossip:topology=ring|torus|exponential|random|complete[,peers=K]``: decentralized SGD (D-PSGD, Lian et al.
  NeurIPS 2017; 000-04): after each step a replica averages its parameters with its neighbours'
  (:mod:`plait.plan.gossip`);
- ``async_ps:staleness=B[,servers=S]`` and ``easgd:alpha=A,every=H``: asynchronous, bounded-staleness SGD through
  servers (000-18; Stale Synchronous Parallel, Ho et al., NeurIPS 2013) and asynchronous elastic averaging SGD
  (Zhang, Choromanska & LeCun, NeurIPS 2015; 001-05), on server ranks beyond the workers
  (:mod:`plait.run.async_train`, :mod:`plait.cost.async_sgd`).

A spec is kept in its canonical form (every parameter, in the order below) so that equal methods compare equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from plait.errors import ConfigError

# method -> parameter -> (default, low, high, integer); None default: required
PARAMETERS: dict[str, dict[str, tuple[float | None, float, float, bool]]] = {
    "allreduce": {},
    "bf16": {},
    "fp16": {},
    "powersgd": {"rank": (None, 1, 2**20, True), "min_compression_rate": (2.0, 0.0, 1e6, False),
                 "start_iter": (2, 2, 2**31 - 1, True)},
    "topk": {"ratio": (None, 1e-9, 1.0, False)},
    "quantize": {"bits": (8, 1, 8, True)},
    "local_sgd": {"every": (None, 1, 2**31 - 1, True)},
    "diloco": {"every": (None, 1, 2**31 - 1, True), "outer_lr": (0.7, 0.0, 1e3, False),
               "outer_momentum": (0.9, 0.0, 1.0, False)},
    "palsgd": {"every": (None, 1, 2**31 - 1, True), "p": (0.2, 0.0, 0.99, False), "eta": (0.5, 0.0, 1e3, False),
               "outer_lr": (0.25, 0.0, 1e3, False), "outer_momentum": (0.9, 0.0, 1.0, False),
               "warmup": (0, 0, 2**31 - 1, True)},
    "dreamddp": {"every": (None, 1, 2**31 - 1, True)},
    "pipe_sgd": {},
    "param_server": {"servers": (1, 1, 2**20, True), "placement": (0, 0, 1, True), "host": (0, 0, 1, True),
                     "hybrid": (0, 0, 1, True)},
    "switch_aggregation": {"bits": (32, 16, 32, True)},
    "gossip": {"topology": (0, 0, 4, True), "peers": (1, 1, 2**20, True)},
    "async_ps": {"staleness": (None, 0, 2**20, True), "servers": (1, 1, 2**20, True)},
    "easgd": {"alpha": (None, 0.0, 1.0, False), "every": (None, 1, 2**31 - 1, True)},
}
"""Defaults: PowerSGD's ``min_compression_rate`` 2 as ``PowerSGDState``'s (torch 2.13), ``start_iter`` 2, the
least ``PowerSGDState`` accepts with error feedback; DiLoCo's outer SGD lr 0.7, Nesterov momentum 0.9 (Douillard
et al. 2023, Sec. 3; torchft's DiLoCo trainer uses the same); PALSGD's p 0.2, eta 0.5, outer lr 0.25 and Nesterov
momentum 0.9: the defaults of its authors' GPT-Neo trainer (github.com/Hiroki11x/Pseudo-Asynchronous-LocalSGD at
2c37c48, ``gptneo_8m``; their paper's own settings were not found). PALSGD's ``warmup``: steps of plain
data parallelism before the local steps begin (the authors' ``local_sgd_start_iter``, default 100 in their
trainer's options, 32 in their README's example); 0 here, the setting plait's measured multipliers were taken at."""
CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "param_server": {"placement": ("balanced", "layerwise"), "host": ("ranks", "cpu"), "hybrid": ("false", "true")},
    "gossip": {"topology": ("ring", "torus", "exponential", "random", "complete")},
}
"""Parameters that take a name: stored as the name's index, written and read as the name."""
QUANTIZE_BITS = (1, 4, 8)
SWITCH_BITS = (16, 32)
MODELLED = ("allreduce", "bf16", "fp16", "powersgd", "topk", "quantize", "local_sgd", "diloco", "palsgd", "dreamddp",
            "pipe_sgd", "param_server", "switch_aggregation", "gossip", "async_ps", "easgd")
"""Methods the cost model (:mod:`plait.cost.sync`) and plait's runtime (:mod:`plait.run.sync`) cover so far."""
COMPRESSED = ("bf16", "fp16", "powersgd", "topk", "quantize")
"""Methods that compress each step's gradients (in DDP's buckets: unsharded replicas only)."""
ASYNCHRONOUS = ("async_ps", "easgd")
"""Methods whose workers do not wait for each other, through dedicated server ranks (:mod:`plait.run.async_train`)."""
AGGREGATED = ("param_server", "switch_aggregation")
"""Methods that sum every replica's whole gradient each step somewhere other than in an all-reduce."""
WHOLE_GRADIENTS = (*COMPRESSED, "pipe_sgd", *AGGREGATED, *ASYNCHRONOUS)
"""Methods that work on every replica's whole gradient each step (unsharded replicas only)."""
INFREQUENT = ("local_sgd", "diloco", "palsgd", "dreamddp", "gossip")
"""Methods that train replicas apart and average parameters every few steps (over whole replicas: with sharding,
over HSDP's ``dp_replicate`` groups, each replica sharded within itself)."""


@dataclass(frozen=True)
class Sync:
    """A parsed synchronization method."""

    method: str
    """One of :data:`PARAMETERS`."""
    params: tuple[tuple[str, float], ...]
    """Every parameter of the method with its value, in :data:`PARAMETERS` order."""

    def __getitem__(self, name: str) -> float:
        return dict(self.params)[name]

    def choice(self, name: str) -> str:
        """The name a :data:`CHOICES` parameter takes."""
        return CHOICES[self.method][name][int(self[name])]

    @property
    def spec(self) -> str:
        """The canonical ``METHOD[:key=value,...]`` text."""
        if not self.params:
            return self.method
        values = ",".join(f"{k}={_written(self.method, k, v)}" for k, v in self.params)
        return f"{self.method}:{values}"

    @property
    def server_ranks(self) -> int:
        """Ranks beyond the workers this method's servers run on (:mod:`plait.run.async_train`): ``async_ps`` and
        ``param_server:host=cpu`` their ``servers``, ``easgd`` one, every other method none."""
        if self.method == "easgd":
            return 1
        if self.method == "async_ps" or (self.method == "param_server" and self.choice("host") == "cpu"):
            return int(self["servers"])
        return 0

    @property
    def every(self) -> int:
        """Steps between synchronizations (1 for per-step methods)."""
        return int(dict(self.params).get("every", 1))


def _written(method: str, key: str, value: float) -> str:
    names = CHOICES.get(method, {}).get(key)
    if names:
        return names[int(value)]
    return str(int(value)) if PARAMETERS[method][key][3] else repr(float(value))


SPECS: list[str] = ["allreduce"]
"""Canonical specs seen in this process, by code (``plait.plan.columns`` stores a plan's ``dp_sync`` as its
index). Codes are per process: columns built in a worker process are read back there (the planner's pieces
return plans, not codes)."""
_CODES: dict[str, int] = {"allreduce": 0}


def intern_sync(spec: str) -> int:
    """The code of canonical ``spec``, added to :data:`SPECS` on first sight."""
    found = _CODES.get(spec)
    if found is None:
        found = _CODES[spec] = len(SPECS)
        SPECS.append(spec)
    return found


def parse_sync(text: str) -> Sync:
    """Parse ``METHOD[:key=value,...]``; one-line errors name the value and the rule."""
    method, _, rest = text.strip().partition(":")
    method = method.strip()
    if method not in PARAMETERS:
        raise ConfigError(f"dp_sync={text!r}: method {method!r} must be one of {', '.join(PARAMETERS)}")
    allowed = PARAMETERS[method]
    given: dict[str, float] = {}
    for item in (p for p in rest.split(",") if p.strip()) if rest else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            known = ", ".join(allowed) or "none"
            raise ConfigError(f"dp_sync={text!r}: {item.strip()!r} must be key=value with key one of {known}")
        if key in given:
            raise ConfigError(f"dp_sync={text!r}: {key} is given twice")
        names = CHOICES.get(method, {}).get(key)
        if names:
            if value.strip() not in names:
                raise ConfigError(f"dp_sync={text!r}: {key}={value.strip()!r} must be one of {', '.join(names)}")
            given[key] = float(names.index(value.strip()))
            continue
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"dp_sync={text!r}: {key}={value.strip()!r} must be a number") from None
        default, low, high, integer = allowed[key]
        if not math.isfinite(number) or not low <= number <= high or (integer and not number.is_integer()):
            kind = "a whole number" if integer else "a number"
            raise ConfigError(f"dp_sync={text!r}: {key}={value.strip()} must be {kind} in [{low:g}, {high:g}]")
        given[key] = number
    if method == "quantize" and given.get("bits", 8) not in QUANTIZE_BITS:
        raise ConfigError(f"dp_sync={text!r}: bits must be one of {', '.join(map(str, QUANTIZE_BITS))}")
    if method == "gossip" and given.get("peers", 1) != 1 and CHOICES["gossip"]["topology"][
            int(given.get("topology", 0))] not in ("exponential", "random"):
        raise ConfigError(f"dp_sync={text!r}: peers applies to topology=exponential|random (the others fix their "
                          "neighbours)")
    if method == "switch_aggregation" and given.get("bits", 32) not in SWITCH_BITS:
        raise ConfigError(f"dp_sync={text!r}: bits must be one of {', '.join(map(str, SWITCH_BITS))}")
    params = []
    for key, (default, *_rest) in allowed.items():
        if key not in given and default is None:
            raise ConfigError(f"dp_sync={text!r}: {method} needs {key}=...")
        params.append((key, given.get(key, default)))
    return Sync(method, tuple((k, float(v)) for k, v in params))


def rows_with(cols: Any, methods: tuple[str, ...]) -> Any:
    """Rows of plan columns ``cols`` (:class:`plait.plan.columns.PlanColumns`) whose method is in ``methods``."""
    if cols.xp.scalar:  # one plan: one lookup
        return SPECS[cols["dp_sync"]].partition(":")[0] in methods
    codes = [i for i, spec in enumerate(SPECS) if spec.partition(":")[0] in methods]
    return cols.xp.any_of([cols["dp_sync"] == i for i in codes]) if codes else cols.full(False)


def spec_values(cols: Any, method: str, key: str, fill: float) -> Any:
    """Per row of ``cols``, the value of parameter ``key`` of the row's ``method`` spec (``fill`` on other rows)."""
    if cols.xp.scalar:
        spec = SPECS[cols["dp_sync"]]
        return parse_sync(spec)[key] if spec.partition(":")[0] == method else fill
    out = cols.full(fill)
    for code, spec in enumerate(SPECS):
        if spec.partition(":")[0] == method:
            out = cols.xp.where(cols["dp_sync"] == code, parse_sync(spec)[key], out)
    return out


def on_server_ranks(cols: Any) -> Any:
    """Rows of plan columns ``cols`` whose method runs servers on ranks beyond the workers (:attr:`Sync.server_ranks`)."""
    if cols.xp.scalar:
        return parse_sync(SPECS[cols["dp_sync"]]).server_ranks > 0
    codes = [i for i, spec in enumerate(SPECS) if parse_sync(spec).server_ranks > 0]
    return cols.xp.any_of([cols["dp_sync"] == i for i in codes]) if codes else cols.full(False)
