"""Packaged TOML files read through their parsed copies give exactly what parsing gives."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from plait import packaged
from plait.packaged import packaged_toml

SRC = Path(packaged.__file__).resolve().parent
SHIPPED = sorted(p for p in SRC.rglob("data/*.toml") if "__pycache__" not in p.parts)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package folder of one TOML file, where bytecode (and so the parsed copy) may be written."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.toml").write_text('[a]\nx = 1.25\nname = "one"\nlist = [1, 2, 3]\n')
    monkeypatch.setattr(packaged, "_locate", lambda package, parts: tmp_path.joinpath(*parts))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "data"


def test_every_shipped_file_reads_as_parsed() -> None:
    assert len(SHIPPED) >= 6
    for path in SHIPPED:
        package = ".".join(path.relative_to(SRC.parent).parent.parent.parts)
        expected = tomllib.loads(path.read_text(encoding="utf-8"))
        assert packaged_toml(package, "data", path.name) == expected
        assert packaged_toml(package, "data", path.name) == expected  # a second time: from the copy where written


def test_copy_written_once_and_followed_by_edits(data_dir: Path) -> None:
    first = packaged_toml("any", "data", "t.toml")
    copies = list((data_dir / "__pycache__").glob("t.toml.*.marshal"))
    assert first == {"a": {"x": 1.25, "name": "one", "list": [1, 2, 3]}} and len(copies) == 1
    assert packaged_toml("any", "data", "t.toml") == first
    (data_dir / "t.toml").write_text("[a]\nx = 2.5\n")  # edited: another hash, parsed afresh
    assert packaged_toml("any", "data", "t.toml") == {"a": {"x": 2.5}}
    assert len(list((data_dir / "__pycache__").glob("t.toml.*.marshal"))) == 1  # the earlier copy removed


def test_a_copy_is_read_without_the_parser(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a file without its parsed copy loads the TOML parser (a catalog read from its copy does not)."""
    first = packaged_toml("any", "data", "t.toml")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # importing it now raises ImportError
    assert packaged_toml("any", "data", "t.toml") == first
    (data_dir / "t.toml").write_text("[a]\nx = 2.5\n")  # no copy of these bytes: the parser is asked for
    with pytest.raises(ImportError):
        packaged_toml("any", "data", "t.toml")


def test_a_damaged_copy_is_parsed_past(data_dir: Path) -> None:
    packaged_toml("any", "data", "t.toml")
    (copy,) = (data_dir / "__pycache__").glob("t.toml.*.marshal")
    copy.write_bytes(b"\x00not marshal")
    assert packaged_toml("any", "data", "t.toml")["a"]["x"] == 1.25


def test_nothing_written_without_bytecode(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert packaged_toml("any", "data", "t.toml")["a"]["name"] == "one"
    assert not (data_dir / "__pycache__").exists()
