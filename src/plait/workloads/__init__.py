"""Workload kinds as plug-ins: a registry maps a ``--model`` name or file to the kind that prices it.

A kind is one :class:`WorkloadKind` object: how it recognises a name or file, its strict reader (the typed
description), the options it owns, and its entries for the commands (``estimate``, ``plan``, ``simulate``, ``run``)
and for ``plait validate``. The commands ask :func:`load` for the workload and call its kind's entry; nothing above
this package sniffs a file or branches on a kind. Kinds are tried in registration order; the transformer kind (the
catalog, a ``config.json`` or a model TOML) recognises every name and comes last, so a kind registered later (a
plug-in, or a test's toy kind) is tried before it.

Shipped kinds: :mod:`plait.workloads.dlrm`, :mod:`plait.workloads.gnn`, :mod:`plait.workloads.dit`,
:mod:`plait.workloads.federated`, :mod:`plait.workloads.glm`, :mod:`plait.workloads.traced`,
:mod:`plait.workloads.transformer`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from plait.errors import ConfigError

Options = Mapping[str, Any]
"""A command's parsed options by parameter name (``plait estimate``'s ``gpus``, ``global_batch``, ...)."""
Entry = Callable[["Workload", Options], None]
"""A kind's entry for one command: prices (or runs) the workload under the options and prints the result."""

SHIPPED = ("dlrm", "gnn", "dit", "federated", "glm", "traced", "transformer")
"""The kinds plait ships, in the order they are tried (the transformer kind recognises every name: last)."""


@dataclass(frozen=True, kw_only=True)
class Validation:
    """A kind's ``plait validate`` reader: measured rows of a CSV predicted and compared."""

    option: str
    """The ``plait validate`` parameter that names the CSV (``gnn`` for ``--gnn``)."""
    read: Callable[[Path, Callable[[int, int], None] | None], list[Any]]
    """Predicts each row of the CSV, the progress of the rows heard by its second argument (``None``: silent); the
    rows' results (``source``, ``label``, ``error_pct``, ``why_not``, ...)."""
    title: str
    """What is compared, before "MAPE" in the table's title."""
    error: str
    """How the error is defined (printed with the JSON)."""


@dataclass(frozen=True, kw_only=True)
class WorkloadKind:
    """One workload kind (module docstring): what the layers ask of it."""

    name: str
    """The kind's registry name (``gnn``)."""
    label: str
    """How messages name a description of it (``GNN`` in "a GNN TOML")."""
    recognises: Callable[[str | None], bool]
    """Whether a ``--model`` name or file is one of this kind (never raises: a file that is not one is not one)."""
    read: Callable[[str | None], Any]
    """The typed description a name or file gives, through the strict schema (raises :class:`ConfigError`)."""
    options_given: Callable[[Options], str | None] = lambda options: None
    """The error when a command's options include this kind's own options (for another kind), else ``None``."""
    refuses: tuple[str, ...] = ()
    """Kinds whose own options this kind refuses in ``plait estimate`` (checked in this order)."""
    estimate: Entry | None = None
    """``plait estimate``'s entry, which prints its own result; ``None``: the kind's :attr:`price` is printed."""
    price: Callable[[Workload, Options], Any] | None = None
    """The estimate (:class:`plait.cost.estimate.Estimate`) of ``plait estimate``'s options, which the command prints
    (tables, or JSON with the goodput under failures); ``None``: the kind prints its own (:attr:`estimate`)."""
    mixed: bool = False
    """Whether ``plait estimate`` prices the kind's layout options on a mixed cluster's groups."""
    job: Callable[[Workload, Options], Any] | None = None
    """The core's :class:`plait.job.Job` that the layout options or a plan file describe (``plait simulate`` and
    ``plait report`` time its step); ``None``: the kind is not one job of the core's layers."""
    plan: Entry | None = None
    """``plait plan``'s entry; ``None``: the kind is not planned."""
    simulate: Entry | None = None
    """``plait simulate --model``'s entry; ``None``: the core simulates a plan file's step."""
    run: Entry | None = None
    """``plait run --model``'s entry; ``None``: the kind runs from a plan file (or not at all)."""
    run_plan: Entry | None = None
    """``plait run --plan``'s entry for a plan file whose ``[job]`` model is of this kind (the options' ``plan``
    names it); ``None``: the core's runtime runs it (:func:`plait.run.plan_run.run_plan`)."""
    validation: Validation | None = None
    """``plait validate``'s reader of this kind's measured runs."""
    engine: str | None = None
    """The catalog engine (``plait engines``) that runs this kind, priced when ``--engine`` names none; ``None``: the
    core's choice for the cluster (:func:`plait.engine.choice.choose_engine`), or none where ``runtime`` is set."""
    runtime: str = ""
    """What runs this kind where the kind's own model prices it rather than a catalog engine (a DLRM: TorchRec):
    ``--engine`` names a catalog engine, so such a kind refuses it, naming this."""

    def __post_init__(self) -> None:
        if (self.estimate is None) == (self.price is None):
            raise ConfigError(f"workload kind {self.name!r} needs one plait estimate entry: estimate (prints) or "
                              "price (returns the Estimate the command prints)")


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A ``--model`` name or file and the kind that recognised it."""

    kind: WorkloadKind
    """The kind (recognised once, by :func:`load`)."""
    source: str | None
    """The name or path as given (``None``: the command's default model)."""

    @cached_property
    def description(self) -> Any:
        """The typed description (read on first use, so that option errors come before file errors)."""
        return self.kind.read(self.source)


@dataclass
class _Registry:
    kinds: list[WorkloadKind] = field(default_factory=list)
    loaded: bool = False


_REGISTRY = _Registry()


def _shipped() -> list[WorkloadKind]:
    if not _REGISTRY.loaded:
        _REGISTRY.loaded = True
        _REGISTRY.kinds.extend(importlib.import_module(f"plait.workloads.{name}").KIND for name in SHIPPED)
    return _REGISTRY.kinds


def register(kind: WorkloadKind) -> WorkloadKind:
    """Add ``kind`` (tried before the transformer kind, which recognises every name); its name must be new."""
    kinds = _shipped()
    if any(k.name == kind.name for k in kinds):
        raise ConfigError(f"workload kind {kind.name!r} is already registered")
    kinds.insert(len(kinds) - 1, kind)
    return kind


def unregister(name: str) -> None:
    """Remove the kind called ``name`` (a plug-in's or a test's; the shipped kinds stay)."""
    if name in SHIPPED:
        raise ConfigError(f"workload kind {name!r} is shipped with plait and stays registered")
    _shipped()[:] = [k for k in _shipped() if k.name != name]


def kinds() -> tuple[WorkloadKind, ...]:
    """Every registered kind, in the order they are tried."""
    return tuple(_shipped())


def get_kind(name: str) -> WorkloadKind:
    """The registered kind called ``name``."""
    for kind in _shipped():
        if kind.name == name:
            return kind
    raise ConfigError(f"workload kind {name!r} is not one of {', '.join(k.name for k in _shipped())}")


def kind_of(name_or_path: str | None) -> WorkloadKind:
    """The first registered kind that recognises ``name_or_path`` (the transformer kind at last)."""
    return next(kind for kind in _shipped() if kind.recognises(name_or_path))


def load(name_or_path: str | None) -> Workload:
    """The workload ``name_or_path`` names, its kind recognised here, once."""
    return Workload(kind=kind_of(name_or_path), source=name_or_path)


def lazy(target: str) -> Callable[..., Any]:
    """The function ``module:name`` names, imported at its first call: a command imports the entries of the kind it
    runs, not every kind's (``plait estimate`` of a transformer never loads the GNN planner)."""
    module, _, name = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = target
    return call


def refuse_foreign_options(kind: WorkloadKind, options: Options) -> None:
    """Refuse options that belong to the kinds ``kind`` refuses (``--placements`` without a DLRM)."""
    for name in kind.refuses:
        error = get_kind(name).options_given(options)
        if error is not None:
            raise ConfigError(error)


def entry(workload: Workload, command: str) -> Entry:
    """The workload's kind's entry for ``command`` (``plan``, ``simulate``, ``run``); one line where it has none."""
    found = getattr(workload.kind, command)
    if found is None:
        raise ConfigError(f"plait {command} does not take a {workload.kind.label} workload (--model "
                          f"{workload.source!r})")
    return found  # type: ignore[no-any-return]


def refuse_engine(kind: WorkloadKind, engine: str | None) -> None:
    """Refuse ``--engine`` for a kind that a runtime of its own prices (it would have no effect)."""
    if engine is not None and kind.runtime:
        raise ConfigError(f"--engine {engine}: a {kind.label} is priced as {kind.runtime} runs it, not by a catalog "
                          "engine; leave --engine out")


def labels_with(entry: str) -> str:
    """The labels of the kinds that have an entry for a command, as a sentence ("DLRM, GNN or DiT")."""
    found = [k.label for k in _shipped() if getattr(k, entry) is not None]
    return found[0] if len(found) == 1 else ", ".join(found[:-1]) + " or " + found[-1]
