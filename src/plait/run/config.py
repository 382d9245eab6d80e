"""A rank's run configuration: one frozen, typed dataclass per worker entry point, read by one parser.

The launcher (``plait run``) writes the configuration as a JSON file (:func:`write_config`) and starts every rank with
``--config FILE``; a rank reads it with :func:`read_config`, the one function every worker entry point calls. The
same function also reads the configuration as command-line options derived from the dataclass (``--plan p.toml
--steps 4``: a field ``check_every`` is ``--check-every``, its docstring the help), which is how tests, benchmarks
and a multi-node torchrun line start a rank by hand. Either way the file's or the flags' values are checked against
the field types: an unknown key, a missing required field or a value of the wrong type is a :class:`ConfigError`
(a file through the strict schema, :func:`plait.schema.build`).

Torch-free, so the CLI writes what the ranks read without importing the runtime.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from plait.errors import ConfigError
from plait.run.uneven import parse_list
from plait.schema import build, table

Config = TypeVar("Config")

COMMA = "comma"
"""Field metadata ``{"form": COMMA}``: a tuple written as one comma-separated option (``--slowdown 1,3``)."""
APPEND = "append"
"""Field metadata ``{"form": APPEND}``: a tuple written as a repeated option (``--spec a --spec b``)."""
POSITIONAL = "positional"
"""Field metadata ``{"form": POSITIONAL}``: a tuple written as the command line's positional arguments."""
ALWAYS = "always"
"""Field metadata ``{ALWAYS: True}``: :func:`config_argv` writes the option even at its default."""


def write_config(config: Any, path: Path) -> Path:
    """``config`` (a dataclass instance) as a JSON file at ``path``; returns ``path``."""
    doc = {f.name: _to_json(getattr(config, f.name)) for f in dataclasses.fields(config)}
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def read_config(cls: type[Config], argv: list[str] | None = None, prog: str | None = None,
                description: str | None = None) -> Config:
    """The configuration a worker entry point runs with: ``--config FILE`` (as :func:`write_config` wrote it), or
    the dataclass's fields as command-line options. ``argv`` ``None``: this process's arguments; ``description``
    (``--help``; default: the class's docstring). On the command line a value the dataclass refuses (a
    :class:`ConfigError`) is a usage error."""
    parser = _parser(cls, prog, description)
    args = parser.parse_args(argv)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    given = {f.name: getattr(args, f.name) for f in fields if getattr(args, f.name) not in (None, [])
             and getattr(args, f.name) != parser.get_default(f.name)}
    if args.config is not None:
        if given:
            parser.error("--config takes no other option")
        where = f"run config {cls.__name__}"
        return build(cls, table(json.loads(Path(args.config).read_text(encoding="utf-8")), where), where)
    missing = [_flag(f) for f in fields if f.name in _required(cls) and f.name not in given]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    try:
        return cls(**{name: _from_flag(value, _hints(cls)[name], name) for name, value in given.items()})
    except ConfigError as exc:
        parser.error(str(exc))


def config_argv(config: Any) -> list[str]:
    """The command-line options that :func:`read_config` reads back as ``config``: fields in declaration order,
    each written where it differs from its default (or is marked ``ALWAYS``); flags for true booleans."""
    out: list[str] = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is None or value is False or value == () or (value == _default(f) and not f.metadata.get(ALWAYS)):
            continue
        if value is True:
            out.append(_flag(f))
        elif isinstance(value, tuple) and f.metadata.get("form") == COMMA:
            out += [_flag(f), ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)]
        elif isinstance(value, tuple):
            out += [_flag(f), *map(str, value)]
        else:
            out += [_flag(f), str(value)]
    return out


def _to_json(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


def _flag(f: dataclasses.Field[Any]) -> str:
    return "--" + f.name.replace("_", "-")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _required(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal under it in the class body, base classes too), for ``--help``."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        statements = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(statements, statements[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr) \
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = " ".join(after.value.value.split()).replace("%", "%%")
    return docs


def _parser(cls: type, prog: str | None, description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description or inspect.getdoc(cls))
    parser.add_argument("--config", type=Path, default=None, help="the run configuration as a JSON file")
    for f in dataclasses.fields(cls):
        kind, choices = _base(_hints(cls)[f.name])
        form = f.metadata.get("form")
        options: dict[str, Any] = {"help": _docs(cls).get(f.name), "default": _default(f)}
        if kind is bool:
            options["action"] = "store_true"
        elif form == APPEND:
            options.update(action="append", default=None)
        elif form == POSITIONAL:
            options.update(nargs="*", default=None)
        elif kind is tuple and form != COMMA:
            options["nargs"] = "+"
        elif choices:
            options["choices"] = choices
        if form == POSITIONAL:
            parser.add_argument(f.name, **options)
        else:
            parser.add_argument(_flag(f), dest=f.name, **options)
    return parser


def _base(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """The type a hint names without ``| None``, and a ``Literal``'s choices."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return _base(args[0])
    if typing.get_origin(hint) is typing.Literal:
        return type(args[0]), tuple(args)
    return typing.get_origin(hint) or hint, ()


def _from_flag(value: Any, hint: Any, name: str) -> Any:
    """A command-line string (or list of them) as the field's type; a comma-separated tuple through its parser."""
    if value is None or not isinstance(value, (str, list)):
        return value
    kind, _ = _base(hint)
    if kind is tuple:
        item = _tuple_item(hint)
        if isinstance(value, str):
            return parse_list(value, "--" + name.replace("_", "-"), item)
        return tuple(_convert(v, item, name) for v in value)
    return _convert(value, kind, name)


def _convert(text: str, kind: Any, name: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"--{name.replace('_', '-')}={text!r} must be {kind.__name__}") from None


def _tuple_item(hint: Any) -> Any:
    """The item type of ``tuple[X, ...]`` (or ``tuple[X, ...] | None``)."""
    for candidate in (hint, *typing.get_args(hint)):
        if typing.get_origin(candidate) is tuple:
            return typing.get_args(candidate)[0]
    raise TypeError(f"{hint} is not a tuple type")
