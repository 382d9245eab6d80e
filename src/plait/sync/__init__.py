"""How data-parallel replicas synchronize: one module per method family, parsed once from ``METHOD[:key=value,...]``.

``allreduce`` is the dense gradient all-reduce every step. The others compress what each step sends
(:mod:`~plait.sync.half`, :mod:`~plait.sync.powersgd`, :mod:`~plait.sync.sparse`; per tier across sites:
:mod:`~plait.sync.site_topk`), send less often
(:mod:`~plait.sync.periodic`, :mod:`~plait.sync.gossip`), run the all-reduce behind the next step
(:mod:`~plait.sync.allreduce`), train several learners per rank (:mod:`~plait.sync.crossbow`), aggregate
elsewhere (:mod:`~plait.sync.servers`) or do not wait
(:mod:`~plait.sync.asynchronous`); docs/research/sync-methods.md says what PyTorch and torchft provide for each.
A method is a frozen dataclass of its parameters (:class:`~plait.sync.base.SyncMethod`) whose canonical text
(:attr:`~plait.sync.base.SyncMethod.spec`) lists every parameter in declaration order, so equal methods compare
equal and print the same.
"""

import importlib
from typing import Any

from plait.sync.allreduce import AllReduce, PipeSGD
from plait.sync.base import SyncMethod
from plait.sync.registry import ALLREDUCE, HOMES, MODELLED, parse

_LAZY = {cls: module for module, cls in HOMES.values()} | {"HalfPrecision": "half", "Gathered": "sparse",
                                                            "METHODS": "registry"}
"""Every method's class (:data:`plait.sync.registry.HOMES`) and the families' other names -> their module,
imported where a name is first asked for (PEP 562): a plan that all-reduces loads none of them."""


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"plait.sync.{_LAZY[name]}"), name)


__all__ = ["ALLREDUCE", "EASGD", "METHODS", "MODELLED", "PALSGD", "AllReduce", "AsyncPS", "Bf16", "Crossbow", "DiLoCo",
           "DreamDDP", "Fp16", "Gathered", "Gossip", "HalfPrecision", "LocalSGD", "ParamServer", "PipeSGD",
           "PowerSGD", "Quantize", "SiteQuantize", "SiteTopK", "SwitchAggregation", "SyncMethod", "TopK", "parse"]
