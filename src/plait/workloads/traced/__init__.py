"""The traced kind: ``--model MODULE:FACTORY`` names any PyTorch module's factory, traced on the meta device
(:mod:`.tracing`, into the description of :mod:`.model`) with the input shape the options give, its layout plans
costed (:mod:`.cost`, :mod:`.predict`), searched (:mod:`.search`) and run from a plan file (:mod:`.run`,
:mod:`.worker`), its measured data-parallel throughputs read by
``plait validate --classic`` (:mod:`.validate`)."""

from __future__ import annotations

from plait.workload.catalog import is_traced_name
from plait.workloads import Options, Validation, WorkloadKind, lazy

COMMANDS = "plait.workloads.traced.commands"
VALIDATE = "plait.workloads.traced.validate"


def _is_traced(name: str | None) -> bool:
    """``--model`` names a factory (``module:attr``), traced with the input shape the options give."""
    return name is not None and is_traced_name(name)


def _given(options: Options) -> str | None:
    if options.get("loader") or options.get("channels_last"):
        return "--loader and --channels-last describe a traced module's input and layout: pass --model MODULE:FACTORY"
    return None


KIND = WorkloadKind(name="traced", label="traced module", recognises=_is_traced, read=lambda name: name,
                    options_given=_given, refuses=("dlrm", "dit", "gnn"), price=lazy(f"{COMMANDS}:price"), plan=lazy(f"{COMMANDS}:plan"),
                    run_plan=lazy("plait.workloads.traced.run:run_traced_plan"),
                    # a traced module trains under torch.distributed's DDP, FSDP2 and pipelining, which plait's
                    # runtime is (plait engines), not under Megatron-Core's transformer layers
                    engine="plait",
                    validation=Validation(option="classic", read=lazy(f"{VALIDATE}:validate_classic"),
                                          title="classic data parallelism: step-time",
                                          error="step time: predicted over measured, minus one (the throughputs' "
                                                "inverse ratio)"))
