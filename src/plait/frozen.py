"""A frozen dataclass whose ``__init__`` gives the instance its ``__dict__`` whole, in one write.

:func:`dataclasses.dataclass` with ``frozen=True`` makes every field of a new instance go through
``object.__setattr__`` (its ``__setattr__`` refuses writes), a C call through a wrapper per field: a 17-field
:class:`~plait.cost.inner_values.LayerKind` took about 6 us to build against 0.4 us for the same values written into its
``__dict__`` (``timeit`` on a loaded 2-core machine), and one cold estimate builds some two dozen such values
(per-layer quantities, GEMMs, its breakdowns; ``benchmarks/estimate_work.py`` counts them). :func:`direct_init` gives
a frozen dataclass an ``__init__`` of the same signature (the same positional and keyword-only parameters, the same
defaults and factories) that sets ``__dict__`` once to a dict display of the fields, generated as :mod:`dataclasses`
generates its own ``__init__`` (source compiled once per class). One write, not a write per key into
``self.__dict__``: reading ``self.__dict__`` turns the instance's inline values into a dict that shares its keys
with the class, and CPython 3.11's specialised attribute read does not serve such a dict (every later read of a
field took the generic lookup: a cold estimate ran 2.35M machine instructions so, 2.23M with one write, by
``benchmarks/estimate_instructions.py``'s count). The instance is the same: the same fields, equality, hash, ``repr`` and
refusal of writes. Only for classes without ``__post_init__`` or ``__slots__`` (asserted).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import TypeVar

T = TypeVar("T", bound=type)


def direct_init(cls: T) -> T:
    """``cls`` (a frozen dataclass) with an ``__init__`` of the same parameters that sets the instance's ``__dict__``
    in one write."""
    assert is_dataclass(cls) and cls.__dataclass_params__.frozen, "a frozen dataclass"  # type: ignore[attr-defined]
    assert not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__"), "no __post_init__, no __slots__"
    given = [f for f in fields(cls) if f.init]
    assert not {"self", "_set", "_FACTORY"} & {f.name for f in fields(cls)}, "no field named as the names __init__ uses"
    scope: dict[str, object] = {"_FACTORY": _FACTORY, "_set": object.__setattr__}
    for f in fields(cls):
        if f.default is not MISSING:
            scope[f"_default_{f.name}"] = f.default
        elif f.default_factory is not MISSING:
            scope[f"_factory_{f.name}"] = f.default_factory
    positional = [_parameter(f) for f in given if not f.kw_only]
    keyword = [_parameter(f) for f in given if f.kw_only]
    parameters = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    # as dataclasses' own: a field outside the signature is stored only when a factory makes it (else the class
    # attribute, its default, serves)
    stored = ", ".join(f"{f.name!r}: {_value(f)}" for f in fields(cls) if f.init or f.default_factory is not MISSING)
    source = f"def __init__({parameters}):\n    _set(self, '__dict__', {{{stored}}})"
    made: dict[str, object] = {}
    exec(compile(source, f"<direct __init__ of {cls.__qualname__}>", "exec"), scope, made)  # noqa: S102
    init = made["__init__"]
    own, direct = inspect.signature(cls.__init__).parameters, inspect.signature(init).parameters  # type: ignore[misc]
    assert [(p.name, p.kind) for p in own.values()] == [(p.name, p.kind) for p in direct.values()], (
        "the same parameters"
    )
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return cls


_FACTORY = object()
"""The default of a parameter whose field has a ``default_factory`` (as :mod:`dataclasses` marks it)."""


def _parameter(f: Field[object]) -> str:
    """``f``'s parameter in the signature."""
    if f.default is not MISSING:
        return f"{f.name}=_default_{f.name}"
    return f.name if f.default_factory is MISSING else f"{f.name}=_FACTORY"


def _value(f: Field[object]) -> str:
    """What ``__init__`` stores as ``f`` (an argument, or a field outside the signature made by its factory)."""
    if not f.init:
        return f"_factory_{f.name}()"
    if f.default_factory is MISSING:
        return f.name
    return f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
