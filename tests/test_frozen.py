"""plait.frozen.direct_init: the same instances as the dataclass's own __init__, built by dictionary writes."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field

import pytest

from plait.frozen import direct_init


@dataclass(frozen=True)
class _Plain:
    a: int
    b: float = 2.0
    c: list[int] = field(default_factory=list)
    d: str = field(default="d", init=False)
    e: int = field(default=5, kw_only=True)


@direct_init
@dataclass(frozen=True)
class _Direct:  # _Plain's fields, written out again
    a: int
    b: float = 2.0
    c: list[int] = field(default_factory=list)
    d: str = field(default="d", init=False)
    e: int = field(default=5, kw_only=True)


@pytest.mark.parametrize(("args", "kwargs"), [((1,), {}), ((1, 3.0, [4]), {"e": 6}), ((), {"a": 1, "c": [7]})])
def test_direct_init_builds_what_the_dataclass_init_builds(args: tuple, kwargs: dict) -> None:  # type: ignore[type-arg]
    plain, direct = _Plain(*args, **kwargs), _Direct(*args, **kwargs)
    assert list(vars(direct).items()) == list(vars(plain).items())
    assert _Direct(*args, **kwargs) == direct and repr(direct) == repr(plain).replace("_Plain", "_Direct")
    assert _Direct(1).c is not _Direct(1).c  # a fresh default each time
    with pytest.raises(dataclasses.FrozenInstanceError):
        direct.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Direct(1, 2.0, [], 4)  # type: ignore[misc]  # e is keyword-only, as in the dataclass's own signature


def test_direct_init_refuses_a_class_that_checks_itself() -> None:
    @dataclass(frozen=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            assert self.a > 0

    with pytest.raises(AssertionError, match="__post_init__"):
        direct_init(Checked)


def test_direct_init_refuses_an_init_only_variable() -> None:
    @dataclass(frozen=True)
    class WithInitVar:
        a: int
        b: InitVar[int] = 0

    with pytest.raises(AssertionError, match="same parameters"):
        direct_init(WithInitVar)
