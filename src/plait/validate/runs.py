"""Read measured training runs (the schema of ``plait/validate/data/README.md``) into typed rows.

A row is parsed once here; an unreadable file or a malformed value is a one-line
:class:`ConfigError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from plait.engine.catalog import DEFAULT_ENGINE
from plait.errors import ConfigError, read_user_file
from plait.validate.records import positive

REQUIRED_COLUMNS = (
    "id", "source", "model", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "mlp", "vocab", "seq_len",
    "moe_experts", "moe_top_k", "moe_ffn_hidden", "system", "gpu", "n_gpus", "tp", "pp", "dp", "cp", "ep", "vpp",
    "micro_batch", "global_batch", "recompute", "sharding", "precision", "step_time_s", "notes",
)


_FP8_RECIPES = {"FP8-CS": "current", "FP8-MX": "mxfp8"}
"""Megatron-Bridge's performance-summary precision names and the engine's ``fp8_recipe`` option of each."""

_MAY_2023 = "llm-foundry@2023-05"
"""The engine of llm-foundry's README rows from its May-2023 sweep (engines.toml gives the sources)."""

_MB_HYBRIDEP = frozenset((model, gpu) for model in ("Qwen3_235B_a22B", "Qwen3_30B_a3B", "DeepSeekV3")
                         for gpu in ("gb200", "gb300"))
"""(model, GPU), as the performance summary names them (the ``model`` and ``gpu`` columns), whose Megatron-Bridge
25.11 performance recipe dispatches its experts' tokens with HybridEP
(``moe_flex_dispatcher_backend="hybridep"``: v0.2.0 scripts/performance/configs/qwen3/workload_base_configs.py
L42-197, the GB300 and GB200 configs of Qwen3-235B-A22B and Qwen3-30B-A3B; configs/deepseek/workload_base_configs.py
L27-60, DeepSeek-V3 on GB300 and GB200); the others keep the providers' ``alltoall`` dispatcher (and DeepEP for
DeepSeek-V3 on H100). The performance summary names no dispatcher: its rows are those recipes' runs."""

_MB_OFFLOAD = {("LLAMA3_70B", "gb300", "FP8-CS"): 20, ("LLAMA3_70B", "gb200", "FP8-CS"): 40}
"""(model, GPU, precision), as the performance summary names them, whose Megatron-Bridge 25.11 performance recipe
keeps every activation and offloads the first N layers' to host memory (``cpu_offloading_num_layers``: v0.2.0
scripts/performance/configs/llama3/workload_base_configs.py L43-48, GB300 FP8-CS 20, and L73-78, GB200 FP8-CS 40;
the same counts in the GBS-256 configs of the table's rows, @c0b9a0003 scripts/performance/configs/llama/
llama3_workload_base_configs.py L211-216 and L241-246). Nothing recomputes: the recipe
(src/megatron/bridge/recipes/llama/llama3.py ``llama3_70b_pretrain_config``) sets no recompute granularity, and
``set_recompute_overrides`` (scripts/performance/utils/helpers.py L163) sets one only with ``recompute_num_layers``."""

@dataclass(frozen=True, kw_only=True)
class RunRow:
    """One measured configuration; ``None`` marks a value the source does not state."""

    id: str
    source: str
    model: str
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    ffn_hidden: int | None
    mlp: str
    vocab: int | None
    seq_len: int | None
    moe_experts: int | None
    moe_top_k: int | None
    moe_ffn_hidden: int | None
    system: str
    """The cluster: a preset name, or the path of a cluster file (TOML or YAML) the row names, relative to the runs
    file's folder where written so; empty where the source does not say."""
    gpu: str
    n_gpus: int | None
    tp: int | None
    pp: int | None
    dp: int | None
    cp: int | None
    ep: int | None
    vpp: int | None
    micro_batch: int | None
    global_batch: int | None
    recompute: str | None
    sharding: str | None
    precision: str | None
    step_time_s: float | None
    notes: str
    engine: str = "megatron-core"
    """The engine that produced the measurement (``name@version[options]``, :mod:`plait.engine.catalog`); a file
    without the column is taken as the default engine."""
    model_config: Path | None = None
    """The Hugging Face ``config.json`` the row's model comes from (the ``model_config`` column, a file in the
    ``model_configs`` folder beside the runs file or beside its folder), ``None`` where the row gives none."""

    def missing_shape(self) -> str | None:
        """The first shape column a prediction needs that the row leaves empty."""
        for column in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "n_gpus", "global_batch"):
            if getattr(self, column) is None:
                return column
        return None

    @property
    def sequence_parallel(self) -> bool | None:
        """``True`` when the notes say ``sp``, ``False`` when they say "no sequence parallelism", else ``None``."""
        if "no sequence parallelism" in self.notes or "no --sequence-parallel" in self.notes:
            return False
        return True if self.notes.split(";")[0].strip() == "sp" else None

    @property
    def untied_embeddings(self) -> bool:
        """The notes say the run unties its input embedding and output layer (``untied embeddings``; Megatron-LM's
        ``--untie-embeddings-and-output-weights``), which a plain-MLP (GPT-style) row otherwise ties."""
        return "untied embeddings" in self.notes.lower()

    @property
    def selective_layer(self) -> bool:
        """The notes say the run's selective checkpointing was torchtitan's per-block kind (``selective layer``:
        every second block recomputed whole), not its per-op default."""
        return "selective layer" in self.notes.lower()

    def _quoted(self, key: str) -> str | None:
        """The value the notes give as ``key='...'``, else ``None``."""
        marker = f"{key}='"
        return self.notes.split(marker, 1)[1].split("'")[0] if marker in self.notes else None

    @property
    def run_engine(self) -> str:
        """The ``engine`` column with what the row's own notes say about the run: the software its sharding ran on
        where ``sharding_raw`` names another (``'ZeRO-3 (DeepSpeed), ...'``: Narayanan et al.'s ZeRO-3 baseline,
        at the column's version), llm-foundry's FSDP mixed-precision mode (``FSDP mp mode DEFAULT``; ``PURE``: the
        May-2023 sweep, :data:`_MAY_2023`), a Megatron-Bridge
        run's fp8 recipe (``precision_raw='FP8-CS'``: current scaling, ``'FP8-MX'``: MXFP8) and
        MoE dispatcher (HybridEP where its performance recipe sets it, :data:`_MB_HYBRIDEP`), and whether a
        torchtitan run compiled (the notes say ``compile``; unstated, torchtitan's own default: ``CompileConfig.
        enable = False``, torchtitan 0.3.0 torchtitan/config/configs.py)."""
        name, version = self._engine_name_version
        sharding = self._quoted("sharding_raw") or ""
        if "(DeepSpeed)" in sharding and name != "deepspeed":
            return f"deepspeed@{version}" if version else "deepspeed"
        mode = self.fsdp_mixed_precision
        if name == "llm-foundry" and mode and "[" not in self.engine:
            # PURE marks llm-foundry's May-2023 sweep (torch 1.13.1): its submit_benchmarks.py defaulted
            # --fsdp_config_mixed_precision to PURE (@300cc5c5 L66-68), the later one never passes it (DEFAULT).
            engine = _MAY_2023 if mode == "PURE" and not version else self.engine
            return f"{engine}[mixed_precision={mode}]"
        if name == "torchtitan" and "[" not in self.engine:  # unstated: torchtitan's default, CompileConfig.enable
            return f"{self.engine}[compile={'true' if 'compile' in self.notes.lower() else 'false'}]"  # = False
        if name == "megatron-bridge" and "[" not in self.engine:
            recipe = _FP8_RECIPES.get(self._quoted("precision_raw") or "")
            hybridep = (self.model, self.gpu) in _MB_HYBRIDEP and version == "25.11"
            options = [*(["moe_dispatcher=hybridep"] if hybridep else []), *([f"fp8_recipe={recipe}"] if recipe else [])]
            return f"{self.engine}[{','.join(options)}]" if options else self.engine
        return self.engine

    @property
    def _engine_name_version(self) -> tuple[str, str]:
        """The ``engine`` column's name and version (``""`` where it names none), its options left out."""
        name, _, version = self.engine.split("[")[0].partition("@")
        return name, version

    @property
    def offload_layers(self) -> int | None:
        """Layers whose activations the run offloaded to host memory, recomputing nothing, where its published
        recipe says so (:data:`_MB_OFFLOAD`), else ``None``."""
        if self._engine_name_version != ("megatron-bridge", "25.11"):
            return None
        return _MB_OFFLOAD.get((self.model, self.gpu, self._quoted("precision_raw") or ""))

    @property
    def recompute_raw(self) -> str | None:
        """The source's own name for the recomputation mode (notes ``recompute_raw='...'``), else ``None``."""
        return self._quoted("recompute_raw")

    @property
    def raw_source(self) -> str | None:
        """The document the row was read from (notes ``raw_source='...'``), else ``None``."""
        return self._quoted("raw_source")

    @property
    def fsdp_mixed_precision(self) -> str | None:
        """The FSDP mixed-precision mode the notes record (``"FSDP mp mode DEFAULT"`` -> ``"DEFAULT"``), else ``None``."""
        marker = "FSDP mp mode "
        if marker not in self.notes:
            return None
        return self.notes.split(marker, 1)[1].split(")")[0].split(";")[0].strip() or None


def _int(value: str, column: str, where: str) -> int | None:
    number = positive(value, column, where, integer=True)
    return None if number is None else int(number)


def _float(value: str, column: str, where: str) -> float | None:
    return positive(value, column, where, integer=False)


def _choice(value: str, column: str, allowed: tuple[str, ...], where: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    if value not in allowed:
        raise ConfigError(f"{where}: column {column}={value!r} must be one of {', '.join(allowed)}")
    return value


def _model_config(name: str, folder: Path | None, where: str) -> Path | None:
    """The ``model_config`` file ``name`` in ``model_configs/`` beside the runs file's folder (the shared dataset's
    layout, ``training_runs/`` and ``model_configs/`` side by side) or inside it."""
    name = name.strip()
    if not name:
        return None
    if folder is None or Path(name).name != name:
        raise ConfigError(f"{where}: model_config={name!r} must name a file in a model_configs folder")
    for candidate in (folder.parent / "model_configs" / name, folder / "model_configs" / name):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{where}: model_config={name!r} is in neither {folder.parent / 'model_configs'} nor "
                      f"{folder / 'model_configs'}")


CLUSTER_FILE_SUFFIXES = (".toml", ".yaml", ".yml")


def _system(name: str, folder: Path | None, where: str) -> str:
    """The ``system`` cell: a cluster preset (``plait clusters``) as written, or a cluster file (TOML or YAML, as
    ``--cluster`` takes), relative to the runs file's folder, as its path."""
    name = name.strip()
    if Path(name).suffix not in CLUSTER_FILE_SUFFIXES:
        return name
    path = Path(name) if Path(name).is_absolute() or folder is None else folder / name
    if not path.is_file():
        raise ConfigError(f"{where}: system={name!r} names a cluster file, and {str(path)!r} is not a file")
    return str(path)


def parse_row(raw: dict[str, str], where: str, folder: Path | None = None) -> RunRow:
    """One CSV record to a RunRow (``folder``: the runs file's, where ``model_config`` files are looked up)."""
    if None in raw or None in raw.values():  # csv.DictReader's marks of a record longer or shorter than the header
        raise ConfigError(f"{where}: the record has {len(raw) - (None in raw) + len(raw.get(None) or [])} fields, "
                          f"the header {len([k for k in raw if k is not None])}")
    ints = {c: _int(raw[c], c, where) for c in ("moe_experts", "moe_top_k", "moe_ffn_hidden", "tp", "pp", "dp", "cp",
                                                 "ep", "vpp", "micro_batch", "global_batch")}
    needed = {c: _int(raw[c], c, where) for c in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                                                  "vocab", "seq_len", "n_gpus")}
    return RunRow(
        id=raw["id"].strip(), source=raw["source"].strip(), model=raw["model"].strip(),
        mlp=_choice(raw["mlp"], "mlp", ("plain", "gated"), where) or "plain",
        system=_system(raw["system"], folder, where), gpu=raw["gpu"].strip(),
        recompute=_choice(raw["recompute"], "recompute", ("none", "selective", "full"), where),
        sharding=_choice(raw["sharding"], "sharding", ("none", "zero1", "zero2", "zero3"), where),
        precision=_choice(raw["precision"], "precision", ("bf16", "fp16", "fp8"), where),
        step_time_s=_float(raw["step_time_s"], "step_time_s", where),
        notes=raw["notes"], engine=(raw.get("engine") or "").strip() or DEFAULT_ENGINE,
        model_config=_model_config(raw.get("model_config") or "", folder, where), **needed, **ints,
    )


def read_runs(path: Path) -> list[RunRow]:
    """All rows of a runs CSV."""
    reader = csv.DictReader(io.StringIO(read_user_file(path, "runs file"), newline=""))
    try:
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"runs file {str(path)!r} lacks column {missing[0]!r} (schema: plait/validate/data/README.md)")
        return [parse_row(raw, f"{path.name}:{reader.line_num}", path.parent) for raw in reader]
    except csv.Error as exc:
        raise ConfigError(f"runs file {str(path)!r} is not valid CSV: {exc}") from exc
