"""The methods by name, and the one parser of ``METHOD[:key=value,...]``: text becomes a typed method here only."""

from __future__ import annotations

import math
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from plait.errors import ConfigError
from plait.sync.allreduce import AllReduce, PipeSGD
from plait.sync.asynchronous import EASGD, AsyncPS
from plait.sync.base import Choice, MethodError, Number, SyncMethod
from plait.sync.crossbow import Crossbow
from plait.sync.gossip import Gossip
from plait.sync.half import Bf16, Fp16
from plait.sync.periodic import PALSGD, DiLoCo, DreamDDP, LocalSGD
from plait.sync.powersgd import PowerSGD
from plait.sync.servers import ParamServer, SwitchAggregation
from plait.sync.site_quantize import SiteQuantize
from plait.sync.site_topk import SiteTopK
from plait.sync.sparse import Quantize, TopK

METHODS: dict[str, type[SyncMethod]] = {cls.name: cls for cls in (
    AllReduce, Bf16, Fp16, PowerSGD, TopK, Quantize, SiteTopK, SiteQuantize, LocalSGD, DiLoCo, PALSGD, DreamDDP, PipeSGD,
    ParamServer, SwitchAggregation, Gossip, AsyncPS, EASGD, Crossbow)}
"""Every method by its name, in the order error messages list them."""
MODELLED = tuple(METHODS)
"""Methods the cost model (:mod:`plait.cost.sync`) and plait's runtime (:mod:`plait.run.sync`) cover so far."""
ALLREDUCE = AllReduce()
"""The dense gradient all-reduce every step: a plan's default."""


def parse(text: str) -> SyncMethod:
    """Parse ``METHOD[:key=value,...]``; one-line errors name the value and the rule."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    cls = METHODS.get(name)
    if cls is None:
        raise ConfigError(f"dp_sync={text!r}: method {name!r} must be one of {', '.join(METHODS)}")
    allowed = {f.name: f for f in fields(cls)}
    given: dict[str, Any] = {}
    for item in (p for p in rest.split(",") if p.strip()) if rest else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            known = ", ".join(allowed) or "none"
            raise ConfigError(f"dp_sync={text!r}: {item.strip()!r} must be key=value with key one of {known}")
        if key in given:
            raise ConfigError(f"dp_sync={text!r}: {key} is given twice")
        given[key] = _read(text, key, value, allowed[key].metadata["read"])
    for key, f in allowed.items():
        if key not in given and f.default is MISSING:
            raise ConfigError(f"dp_sync={text!r}: {name} needs {key}=...")
    try:
        return cls(**given)
    except MethodError as exc:  # a combination of parameters (each was checked above)
        raise ConfigError(f"dp_sync={text!r}: {exc.rule}") from None


@cache
def parsed(text: str) -> SyncMethod:
    """:func:`parse`, kept per text (a method is immutable): for the tables the planner reads per candidate group."""
    return parse(text)


@cache
def canonical(text: str) -> str:
    """The canonical spec of ``text`` (:attr:`SyncMethod.spec`), kept per text."""
    return parse(text).spec


def _read(text: str, key: str, value: str, read: Number | Choice) -> Any:
    """The value of parameter ``key`` that ``value`` states, by its declaration ``read``."""
    if isinstance(read, Choice):
        if value.strip() not in read.names:
            raise ConfigError(f"dp_sync={text!r}: {key}={value.strip()!r} must be one of {', '.join(read.names)}")
        return read.values[read.names.index(value.strip())]
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"dp_sync={text!r}: {key}={value.strip()!r} must be a number") from None
    low, high, integer = read.low, read.high, read.integer
    if not math.isfinite(number) or not low <= number <= high or (integer and not number.is_integer()):
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"dp_sync={text!r}: {key}={value.strip()} must be {kind} in [{low:g}, {high:g}]")
    return int(number) if integer else number
