"""What this machine can run: checks made before any process group or model exists.

The static part is the capability table (:mod:`plait.engine.capability`, plait's engine on this machine kind);
what only the device can tell — fp8 tensor cores, SDPA's kernels, a CPU ``torch._scaled_mm`` — is asked here.
"""

from __future__ import annotations

from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.plan.per_stage import stage_tp_refusal
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


def check_runnable(plan: Plan, model: ModelSpec, on_gpu: bool) -> None:
    """Raise a one-line :class:`ConfigError` naming the option for a plan the runtime cannot execute here."""
    refusal = first_unsupported(plan, model, get_engine("plait"), "cuda" if on_gpu else "cpu")
    if refusal:
        raise ConfigError(refusal)
    # torch only where the device has a say: ``plait run`` launches its ranks without importing it (1-2 s of CPU)
    if plan.cp > 1 and on_gpu:
        from plait.run.context import check_context_parallel

        check_context_parallel(plan, on_gpu)  # SDPA kernels enabled on this device
    if plan.precision == "fp8":
        from plait.run.float8 import check_float8

        check_float8(plan, on_gpu)  # sm89+, or a CPU build whose torch._scaled_mm runs
    refusal = stage_tp_refusal(plan, model)  # stages of unequal TP degree: plait.run.stage_tp's scope
    if refusal:
        raise ConfigError(refusal)
