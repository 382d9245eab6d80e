"""The transformer kind (dense and MoE decoders): a catalog name, a Hugging Face ``config.json`` or a model TOML
(:func:`plait.workload.catalog.resolve_model`). Its entries (:mod:`.commands`) price the layout options or a plan
file with the core's one estimate assembly and search the core's declared space; it recognises every name no other
kind does, so it is tried last."""

from __future__ import annotations

from plait.workload.catalog import resolve_model
from plait.workload.model import ModelSpec
from plait.workloads import WorkloadKind, lazy

COMMANDS = "plait.workloads.transformer.commands"
ESTIMATE = "plait.workloads.transformer.estimate"


def _read(name: str | None) -> ModelSpec:
    assert name is not None, "the commands name the default model before reading it"
    return resolve_model(name)


KIND = WorkloadKind(name="transformer", label="transformer", recognises=lambda name: True, read=_read,
                    refuses=("dlrm", "dit", "gnn", "traced"), price=lazy(f"{ESTIMATE}:price"), job=lazy(f"{ESTIMATE}:job"), plan=lazy(f"{COMMANDS}:plan"),
                    mixed=True)
