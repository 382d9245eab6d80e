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

from plait.sync.allreduce import AllReduce, PipeSGD
from plait.sync.asynchronous import EASGD, AsyncPS
from plait.sync.base import SyncMethod
from plait.sync.crossbow import Crossbow
from plait.sync.gossip import Gossip
from plait.sync.half import Bf16, Fp16, HalfPrecision
from plait.sync.periodic import PALSGD, DiLoCo, DreamDDP, LocalSGD
from plait.sync.powersgd import PowerSGD
from plait.sync.registry import ALLREDUCE, METHODS, MODELLED, parse
from plait.sync.servers import ParamServer, SwitchAggregation
from plait.sync.site_quantize import SiteQuantize
from plait.sync.site_topk import SiteTopK
from plait.sync.sparse import Gathered, Quantize, TopK

__all__ = ["ALLREDUCE", "EASGD", "METHODS", "MODELLED", "PALSGD", "AllReduce", "AsyncPS", "Bf16", "Crossbow", "DiLoCo",
           "DreamDDP", "Fp16", "Gathered", "Gossip", "HalfPrecision", "LocalSGD", "ParamServer", "PipeSGD",
           "PowerSGD", "Quantize", "SiteQuantize", "SiteTopK", "SwitchAggregation", "SyncMethod", "TopK", "parse"]
