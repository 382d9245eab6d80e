"""The GNN kind: a graph neural network's TOML (it has ``[graph]`` and ``[model]``), read by
:func:`.model.read_gnn`, its strategies costed (:mod:`.cost`) and searched by :mod:`.predict`, its step
simulated, its strategies run on CPU ranks by ``plait run``, its measured epochs read by ``plait validate --gnn``."""

from __future__ import annotations

from pathlib import Path

from plait.workload.files import toml_describes
from plait.workloads import Options, Validation, WorkloadKind, lazy

COMMANDS = "plait.workloads.gnn.commands"

OPTIONS = {"gnn_strategy": "sampled_dp", "gnn_library": "", "edge_cut": None, "cache_fraction": 0.0,
           "gnn_sampler": "loop"}
"""``plait estimate``'s GNN options and their defaults (given otherwise, they need a GNN)."""


def is_gnn_file(name: str | None) -> bool:
    """``name`` is a TOML file that describes a GNN (it has ``[graph]`` and ``[model]``)."""
    return toml_describes(name, lazy("plait.workloads.gnn.model:is_gnn_data"))


def _given(options: Options) -> str | None:
    if tuple(options.get(k, v) for k, v in OPTIONS.items()) != tuple(OPTIONS.values()):
        return ("--gnn-strategy, --gnn-library, --gnn-sampler, --edge-cut and --cache-fraction describe a GNN job: "
                "pass --model with a GNN TOML")
    return None


KIND = WorkloadKind(name="gnn", label="GNN", runtime="PyG or DGL (--gnn-library)", recognises=is_gnn_file, read=lambda name: lazy("plait.workloads.gnn.model:read_gnn")(Path(str(name))),
                    options_given=_given, refuses=("dlrm", "traced"), estimate=lazy(f"{COMMANDS}:estimate"),
                    plan=lazy(f"{COMMANDS}:plan"), simulate=lazy(f"{COMMANDS}:simulate"), run=lazy(f"{COMMANDS}:run"),
                    validation=Validation(option="gnn", read=lazy("plait.workloads.gnn.validate:validate_gnn"),
                                          title="GNN training: epoch-time",
                                          error="epoch time: predicted over measured, minus one"))
