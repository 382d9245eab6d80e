"""The GLM kind: a generalized linear model's TOML (it has a ``[glm]`` table), read by :func:`.model.read_glm`;
its splits over ranks (data-parallel, feature-partitioned, switch-aggregated) costed (:mod:`.cost`) and planned
(:mod:`.predict`), trained on CPU ranks by ``plait run`` (:mod:`.worker`) beside one process, with stochastic
coordinate descent's aggregation rules split by feature (:mod:`.scd`) and by example (:mod:`.scd_dual`)."""

from __future__ import annotations

from pathlib import Path

from plait.workload.files import toml_describes
from plait.workloads import WorkloadKind, lazy

COMMANDS = "plait.workloads.glm.commands"


def is_glm_file(name: str | None) -> bool:
    """``name`` is a TOML file that describes a GLM (it has a ``[glm]`` table)."""
    return toml_describes(name, lazy("plait.workloads.glm.model:is_glm_data"))


KIND = WorkloadKind(name="glm", label="GLM", runtime="plait's own GLM worker", recognises=is_glm_file,
                    read=lambda name: lazy("plait.workloads.glm.model:read_glm")(Path(str(name))),
                    refuses=("dlrm", "gnn", "traced"), estimate=lazy(f"{COMMANDS}:estimate"),
                    plan=lazy(f"{COMMANDS}:plan"), run=lazy(f"{COMMANDS}:run"))
