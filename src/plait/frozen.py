"""A frozen dataclass whose ``__init__`` writes its fields straight into the instance's ``__dict__``.

:func:`dataclasses.dataclass` with ``frozen=True`` makes every field of a new instance go through
``object.__setattr__`` (its ``__setattr__`` refuses writes), a C call per field: a 17-field :class:`~plait.cost.inner.
LayerKind` took about 6 us to build against 0.4 us for the same values written into its ``__dict__`` (measured by
``timeit`` on the 2-core CI machine), and one cold estimate builds some two dozen such values (per-layer quantities,
GEMMs, its breakdowns; ``benchmarks/estimate_work.py`` counts them). :func:`direct_init` gives a frozen dataclass an
``__init__`` of the same signature (the same positional and keyword-only parameters, the same defaults) that stores
each argument with one dictionary write, as :mod:`dataclasses` writes its own ``__init__`` (generated source, run
once per class). The instance is the same: the same ``__dict__``, equality, hash, ``repr`` and refusal of writes.
Only for classes without ``__post_init__`` or ``__slots__`` (asserted).
"""

from __future__ import annotations

from dataclasses import MISSING, Field, fields, is_dataclass
from typing import TypeVar

T = TypeVar("T", bound=type)


def direct_init(cls: T) -> T:
    """``cls`` (a frozen dataclass) with an ``__init__`` that writes its fields into the instance's ``__dict__``."""
    assert is_dataclass(cls) and cls.__dataclass_params__.frozen, "a frozen dataclass"  # type: ignore[attr-defined]
    assert not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__"), "no __post_init__, no __slots__"
    given = [f for f in fields(cls) if f.init]
    assert not {"self", "instance_dict"} & {f.name for f in fields(cls)}, "no field named self or instance_dict"
    scope: dict[str, object] = {"_FACTORY": _FACTORY}
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
    body = "".join(
        f"\n    instance_dict[{f.name!r}] = {_value(f)}"
        for f in fields(cls)
        if f.init or f.default_factory is not MISSING
    )
    source = f"def __init__({parameters}):\n    instance_dict = self.__dict__{body}"
    made: dict[str, object] = {}
    exec(compile(source, f"<direct __init__ of {cls.__qualname__}>", "exec"), scope, made)  # noqa: S102
    init = made["__init__"]
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
