"""The federated kind: a TOML with a ``[federated]`` table, read by :func:`.model.read_federated`; one round of
PFLEGO or FedAvg costed (:mod:`.cost`), its settings planned by time to loss (:mod:`.plan`), and both methods run on
CPU ranks as a server and clients (:mod:`.worker`, :mod:`.run`) with their rounds to loss (:mod:`.converge`)."""

from __future__ import annotations

from pathlib import Path

from plait.workload.files import toml_describes
from plait.workloads import WorkloadKind, lazy

COMMANDS = "plait.workloads.federated.commands"


def is_federated_file(name: str | None) -> bool:
    """``name`` is a TOML file that describes a federated job (it has ``[federated]``)."""
    return toml_describes(name, lambda data: "federated" in data)


KIND = WorkloadKind(name="federated", label="federated job", recognises=is_federated_file,
                    read=lambda name: lazy("plait.workloads.federated.model:read_federated")(Path(str(name))),
                    refuses=("dlrm", "gnn", "traced"), estimate=lazy(f"{COMMANDS}:estimate"),
                    plan=lazy(f"{COMMANDS}:plan"), run=lazy(f"{COMMANDS}:run"),
                    runtime="its client device ([client])")
