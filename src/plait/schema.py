"""Strict construction of frozen config dataclasses from parsed files (STYLE.md rule 4).

Files are parsed once at the boundary; this turns the raw mapping into a typed object,
rejecting unknown keys, missing required keys and wrong types with a one-line
:class:`~plait.errors.ConfigError` that names the key and the rule. Hand-written rather
than pydantic to keep the prediction core dependency-free and import-fast (it runs inside
the planner's hot path only at load time, never per candidate).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from plait.errors import ConfigError, all_problems

T = TypeVar("T")


def _check_scalar(value: Any, expected: Any, where: str) -> Any:
    origin = get_origin(expected)
    if origin is Literal:
        choices = get_args(expected)
        if value not in choices:
            raise ConfigError(f"{where}={value!r} must be one of {', '.join(map(str, choices))}")
        return value
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(expected) if a is not type(None)]
        if value is None and len(options) < len(get_args(expected)):
            return None
        errors = []
        for option in options:
            try:
                return _check_scalar(value, option, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if expected is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={value!r} must be true or false")
        return value
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                return int(value)
            raise ConfigError(f"{where}={value!r} must be an integer")
        return value
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}={value!r} must be a number")
        if not math.isfinite(value):
            raise ConfigError(f"{where}={value!r} must be a finite number")
        return float(value)
    if expected is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}={value!r} must be a string")
        return value
    if expected is Path:
        if not isinstance(value, (str, Path)):
            raise ConfigError(f"{where}={value!r} must be a path (a string)")
        return Path(value)
    if getattr(expected, "FILES_HOLD_TEXT", False):  # a typed value its owner parses from its text
        if not isinstance(value, (str, expected)):
            raise ConfigError(f"{where}={value!r} must be a string")
        return value
    if dataclasses.is_dataclass(expected):
        if isinstance(value, expected):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table, got {value!r}")
        return build(expected, value, where)
    if origin is tuple:
        (item_type, _ellipsis) = get_args(expected)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={value!r} must be a list")
        return tuple(_check_scalar(v, item_type, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_type, item_type = get_args(expected)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table, got {value!r}")
        return {
            _check_scalar(k, key_type, f"{where} key"): _check_scalar(v, item_type, f"{where}.{k}")
            for k, v in value.items()
        }
    raise TypeError(f"unsupported field type {expected!r} at {where}")  # our bug, not the user's


@functools.cache
def _fields(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """``cls``'s resolved field types and its ``init`` fields, worked out once per class: resolving the string
    annotations (``typing.get_type_hints``) compiles each one again at every call, the most of a build's time
    (``plait estimate`` builds a catalog entry per model and accelerator it reads)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    return typing.get_type_hints(cls), fields


def build(cls: type[T], raw: Mapping[str, Any], where: str) -> T:
    """Build dataclass ``cls`` from ``raw``; ``where`` prefixes error messages (e.g. ``models.toml:llama3-8b``).
    Every unknown key, missing key and wrong value (nested tables included) is reported in one error."""
    hints, fields = _fields(cls)
    unknown = sorted(set(raw) - set(fields), key=str)
    problems: list[str | ConfigError] = [f"{where}: unknown key {key!r}" for key in unknown]
    if unknown:
        problems[-1] += f" (known: {', '.join(sorted(fields))})"
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in raw:
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            if not has_default:
                problems.append(f"{where}: missing required key {name!r}")
            continue
        try:
            kwargs[name] = _check_scalar(raw[name], hints[name], f"{where}.{name}")
        except ConfigError as exc:
            problems.append(exc)
    if problems:
        raise all_problems(problems)
    return cls(**kwargs)


def table(raw: Any, where: str) -> Mapping[str, Any]:
    """``raw`` as a table (a TOML table, a JSON object); anything else is an error naming ``where``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a table, got {raw!r}")
    return raw


def check_keys(raw: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse keys of ``raw`` outside ``known`` (a file's top level, whose tables :func:`build` reads)."""
    unknown = sorted(set(raw) - set(known), key=str)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")


def value(raw: Any, expected: Any, where: str) -> Any:
    """``raw`` checked against the type ``expected`` (as :func:`build` checks a field)."""
    return _check_scalar(raw, expected, where)
