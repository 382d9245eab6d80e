"""The methods by name, and the one parser of ``METHOD[:key=value,...]``: text becomes a typed method here only."""

from __future__ import annotations

import importlib
import math
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from plait.errors import ConfigError
from plait.sync.allreduce import AllReduce
from plait.sync.base import Choice, MethodError, Number, SyncMethod

HOMES: dict[str, tuple[str, str]] = {
    "allreduce": ("allreduce", "AllReduce"), "bf16": ("half", "Bf16"), "fp16": ("half", "Fp16"),
    "powersgd": ("powersgd", "PowerSGD"), "topk": ("sparse", "TopK"), "quantize": ("sparse", "Quantize"),
    "site_topk": ("site_topk", "SiteTopK"), "site_quantize": ("site_quantize", "SiteQuantize"),
    "local_sgd": ("periodic", "LocalSGD"), "diloco": ("periodic", "DiLoCo"), "palsgd": ("periodic", "PALSGD"),
    "dreamddp": ("periodic", "DreamDDP"), "pipe_sgd": ("allreduce", "PipeSGD"),
    "param_server": ("servers", "ParamServer"), "switch_aggregation": ("servers", "SwitchAggregation"),
    "gossip": ("gossip", "Gossip"), "async_ps": ("asynchronous", "AsyncPS"), "easgd": ("asynchronous", "EASGD"),
    "crossbow": ("crossbow", "Crossbow")}
"""Every method's name -> its module in :mod:`plait.sync` and its class, in the order error messages list them. A
method's module loads when a spec names it (:func:`method_class`): a plan that all-reduces loads no other."""
MODELLED = tuple(HOMES)
"""Methods the cost model (:mod:`plait.cost.sync`) and plait's runtime (:mod:`plait.run.sync`) cover so far."""


def method_class(name: str) -> type[SyncMethod] | None:
    """The class of the method called ``name`` (its module imported now), ``None`` for no method."""
    home = HOMES.get(name)
    return None if home is None else getattr(importlib.import_module(f"plait.sync.{home[0]}"), home[1])


def __getattr__(name: str) -> Any:
    """``METHODS``: every method by its name (each module imported on this first use)."""
    if name == "METHODS":
        return {method: method_class(method) for method in HOMES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ALLREDUCE = AllReduce()
"""The dense gradient all-reduce every step: a plan's default."""


def parse(text: str) -> SyncMethod:
    """Parse ``METHOD[:key=value,...]``; one-line errors name the value and the rule."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    cls = method_class(name)
    if cls is None:
        raise ConfigError(f"dp_sync={text!r}: method {name!r} must be one of {', '.join(HOMES)}")
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
