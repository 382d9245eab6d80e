"""An engine: the software that runs a plan (torchtitan, Megatron-Core/NeMo, DeepSpeed, llm-foundry, MaxText,
plait's own runtime), as the facts that change a plan's cost and the plan options it cannot execute.

A Plan says what is parallelised; the engine decides how. Every fact carries its source (the engine's code or
docs at a version) in ``sources``, keyed by the field it sets; engines are read from ``data/engines.toml``
(:mod:`plait.engine.catalog`), never built ad hoc from a data row's source name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from plait.engine.facts import EngineFacts

ExportTarget = Literal["torchtitan", "megatron", "deepspeed", "plan"]


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One engine at one version, with the options a run set (e.g. torchtitan with ``compile=false``)."""

    name: str
    """Slug, e.g. ``torchtitan``."""
    version: str
    """Version the facts were read at (a release, a year, or a commit)."""
    title: str
    """Display name."""
    framework: EngineFacts
    """Implementation choices the cost model distinguishes."""
    dropout: bool = False
    """Hidden and attention dropout active in the engine's GPT recipes."""
    overlap_grad_reduce: bool = True
    """Data-parallel gradient reduction overlapped with the backward pass."""
    sequence_parallel: bool | None = None
    """Sequence parallelism fixed by the engine (``None``: a plan choice)."""
    grad_reduce_dtype: str = ""
    """Gradient-reduction dtype the engine uses (empty: a plan choice)."""
    selective_full_every: int = 0
    """What the engine calls selective recomputation is full recomputation of every n-th layer (0: Megatron's
    selective recomputation of the attention core, Korthikanti et al. 2022, Sec. 5)."""
    export: ExportTarget = "plan"
    """The configuration ``plait plan --export`` writes for this engine besides plan.toml."""
    launchable: bool = False
    """``plait run --engine`` can launch it on this machine's PyTorch."""
    unsupported: dict[str, str] = field(default_factory=dict)
    """Capability feature (:data:`plait.engine.capability.FEATURES`) -> why the engine cannot run it, with source."""
    machines: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per machine kind (``cpu``, ``cuda``): features the engine cannot run there, with why."""
    sources: dict[str, str] = field(default_factory=dict)
    """Field or fact -> where it is documented."""
    options: tuple[tuple[str, str], ...] = ()
    """Run options applied to the facts, as (name, value) pairs."""
    resolved: str = ""
    """Why this engine stands for the name asked, where the catalog resolved a family name or a version it lacks
    (``nemo@24.11`` -> ``nemo@24.07``), said as a warning wherever it prices a plan; empty: the name asked."""

    @property
    def spec(self) -> str:
        """``name@version`` plus ``[key=value,...]`` when options are set: what an Estimate records."""
        opts = f"[{','.join(f'{k}={v}' for k, v in self.options)}]" if self.options else ""
        return f"{self.name}@{self.version}{opts}"

    def why(self) -> str:
        """Every cited fact, one line each."""
        return "; ".join(f"{k}: {v}" for k, v in self.sources.items())
