"""The DiT kind: a diffusion transformer's TOML (it has ``[dit]``), read by :func:`.model.read_dit`; its parallel
plans costed (:mod:`.cost`) and searched (:mod:`.predict`), its generation simulated (:mod:`.simulate`), Ulysses and
DistriFusion run on CPU ranks by ``plait run`` (:mod:`.worker`), its measured latencies read by ``plait validate
--dit`` (:mod:`.validate`), its fastest runnable plan exported for xDiT (:mod:`.xdit`)."""

from __future__ import annotations

from pathlib import Path

from plait.workload.files import toml_describes
from plait.workloads import Options, Validation, WorkloadKind, lazy

COMMANDS = "plait.workloads.dit.commands"


def is_dit_file(name: str | None) -> bool:
    """``name`` is a TOML file that describes a DiT (it has ``[dit]``)."""
    return toml_describes(name, lazy("plait.workloads.dit.model:is_dit_data"))


def _given(options: Options) -> str | None:
    if options.get("parallel") is not None:
        return "--parallel gives a diffusion transformer's degrees: pass --model with a DiT TOML"
    return None


KIND = WorkloadKind(name="dit", label="DiT", runtime="xDiT", recognises=is_dit_file, read=lambda name: lazy("plait.workloads.dit.model:read_dit")(Path(str(name))),
                    options_given=_given, refuses=("dlrm", "traced"), estimate=lazy(f"{COMMANDS}:estimate"),
                    plan=lazy(f"{COMMANDS}:plan"), simulate=lazy(f"{COMMANDS}:simulate"), run=lazy(f"{COMMANDS}:run"),
                    validation=Validation(option="dit", read=lazy("plait.workloads.dit.validate:validate_dit"),
                                          title="DiT inference: latency",
                                          error="latency end to end (text encoders, denoising with the host's launches, VAE "
                                                "decode): predicted over measured, minus one"))
