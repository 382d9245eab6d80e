"""What this machine can run: checks made before any process group or model exists.

The static part is the capability table (:mod:`plait.engine.capability`, plait's engine on this machine kind);
what only the device can tell — fp8 tensor cores, SDPA's kernels, a CPU ``torch._scaled_mm`` — is asked here.
"""

from __future__ import annotations

from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.context import check_context_parallel
from plait.run.float8 import check_float8
from plait.run.stage_tp import check_stage_tp
from plait.workload.model import ModelSpec


def check_runnable(plan: Plan, model: ModelSpec, on_gpu: bool) -> None:
    """Raise a one-line :class:`ConfigError` naming the option for a plan the runtime cannot execute here."""
    refusal = first_unsupported(plan, model, get_engine("plait"), "cuda" if on_gpu else "cpu")
    if refusal:
        raise ConfigError(refusal)
    check_context_parallel(plan, on_gpu)  # SDPA kernels enabled on this device
    check_float8(plan, on_gpu)  # sm89+, or a CPU build whose torch._scaled_mm runs
    check_stage_tp(plan, model)  # stages of unequal TP degree: plait.run.stage_tp's scope
