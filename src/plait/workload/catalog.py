"""The packaged model catalog (``data/models.toml``, every entry with its source)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, did_you_mean, parsing, read_user_file
from plait.packaged import packaged_toml
from plait.schema import build
from plait.workload.model import ModelSpec

DEFAULT_MODEL = "llama3-8b"
"""The model a command prices when none is named."""


@functools.cache
def _tables() -> dict[str, dict[str, Any]]:
    return packaged_toml("plait.workload", "data", "models.toml")


def model_names() -> list[str]:
    """Slugs of the packaged models."""
    return sorted(_tables())


def model_from_mapping(raw: dict[str, Any], where: str) -> ModelSpec:
    """Build a ModelSpec from a catalog-style table (``moe`` and ``mla`` sub-tables optional, built by :func:`build`)."""
    return build(ModelSpec, raw, where)


@functools.cache
def get_model(slug: str) -> ModelSpec:
    """The packaged model ``slug``."""
    tables = _tables()
    if slug not in tables:
        hint = did_you_mean(slug, tables) or "; see `plait models`"
        if "/" in slug and not Path(slug).suffix:  # a Hugging Face hub id
            hint += " (plait reads no hub: pass the model's config.json as --model)"
        raise ConfigError(f"unknown model {slug!r}{hint}")
    return model_from_mapping(tables[slug], f"models.toml:{slug}")


def is_traced_name(name: str) -> bool:
    """Whether ``--model`` names a factory (``module:attr``) rather than a catalog model or a file: the traced kind
    (:mod:`plait.workloads.traced`) recognises it, :func:`resolve_model` refuses it."""
    module, sep, attr = name.partition(":")
    return bool(sep and attr.isidentifier() and all(p.isidentifier() for p in module.split(".")))


def resolve_model(name_or_path: str) -> ModelSpec:
    """A catalog slug, a Hugging Face ``config.json`` path, or a TOML file holding one model table."""
    if name_or_path in _tables():
        return get_model(name_or_path)
    path = Path(name_or_path)
    if path.suffix == ".json":
        from plait.workload.hf_config import load_hf_config  # a config file only: catalog models need no JSON

        return load_hf_config(path)
    if path.suffix == ".toml":
        text = read_user_file(path, "model file")
        import tomllib  # a user's file only: the packaged catalog is read through plait.packaged

        try:
            with parsing(path, "model file"):
                raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"model file {str(path)!r} is not valid TOML: {exc}") from exc
        return model_from_mapping(raw, str(path))

    if is_traced_name(name_or_path):  # the commands that take a traced module handle it before they get here
        raise ConfigError(f"model {name_or_path!r} is a module factory: plait estimate and plait plan trace it "
                          "and plait run trains its plan file; this command takes catalog models and model files")
    return get_model(name_or_path)
