"""The DLRM kind: a recommendation model's TOML (it lists ``[[tables]]``), read by :func:`.model.read_dlrm`; its
tables placed (:mod:`.search`) and costed (:mod:`.cost`, :mod:`.predict`), exported for and compared with TorchRec's
planner (:mod:`.torchrec`), trained on TorchRec by ``plait run`` (:mod:`.worker`)."""

from __future__ import annotations

from pathlib import Path

from plait.workload.files import toml_describes
from plait.workloads import Options, Validation, WorkloadKind, lazy

COMMANDS = "plait.workloads.dlrm.commands"


def is_dlrm_file(name: str | None) -> bool:
    """``name`` is a TOML file that describes a DLRM (it lists ``[[tables]]``)."""
    return toml_describes(name, lambda data: "tables" in data)


def _given(options: Options) -> str | None:
    if options.get("placements") or options.get("sparse_group"):
        return "--placements and --sparse-group place a DLRM's tables: pass --model with a DLRM TOML"
    return None


KIND = WorkloadKind(name="dlrm", label="DLRM", recognises=is_dlrm_file, read=lambda name: lazy("plait.workloads.dlrm.model:read_dlrm")(Path(str(name))),
                    options_given=_given, refuses=("traced",), estimate=lazy(f"{COMMANDS}:estimate"), plan=lazy(f"{COMMANDS}:plan"),
                    run=lazy(f"{COMMANDS}:run"), runtime="TorchRec",
                    validation=Validation(option="dlrm", read=lazy("plait.workloads.dlrm.validate:validate_dlrm"),
                                          title="DLRM training: throughput",
                                          error="step time (global batch over records per second): predicted over "
                                                "measured, minus one"))
