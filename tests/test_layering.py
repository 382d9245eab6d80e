"""The import layering docs/architecture.md declares is the code's: every ``plait`` import, at module level or
inside a function, points from a package to one in a lower layer, so no package cycle can hide behind a
function-local import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "plait"
DOC = ROOT / "docs" / "architecture.md"


def declared_layers() -> list[set[str]]:
    """The ``layers`` block of docs/architecture.md: one layer a line, the top first; a module of the top-level
    package (``plait/errors.py``) is named by its stem."""
    block = re.search(r"```layers\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/architecture.md must keep its ```layers block"
    return [set(line.split("#")[0].split()) for line in block.group(1).splitlines() if line.split("#")[0].strip()]


def unit_of(path: Path) -> str:
    """The package a source file belongs to (its first folder under ``plait/``, or its stem at the top)."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else path.stem


def imported_units(path: Path) -> set[str]:
    """Every plait package or top-level module ``path`` imports, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "plait" else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "plait" and len(parts) > 1:
                found.add(parts[1])
    return found


def edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) unit pairs across units, with the files that make each."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        here = unit_of(path)
        for there in imported_units(path) - {here}:
            out.setdefault((here, there), []).append(str(path.relative_to(SRC)))
    return out


def test_every_unit_is_declared_once() -> None:
    layers = declared_layers()
    named = [u for layer in layers for u in layer]
    assert len(named) == len(set(named)), "a unit named in two layers"
    units = {unit_of(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert units - set(named) == set(), "units docs/architecture.md does not place"
    assert set(named) - units == set(), "units docs/architecture.md places that do not exist"


def test_imports_point_down_the_declared_layers() -> None:
    rank = {u: i for i, layer in enumerate(declared_layers()) for u in layer}
    upward = {f"{a} -> {b}": files for (a, b), files in edges().items()
              if a in rank and b in rank and rank[b] <= rank[a]}
    assert upward == {}, "imports that point up or sideways (importer -> imported: files)"


def test_the_checker_sees_function_level_and_top_level_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import plait.cost.batch\nfrom plait import units\n\ndef f():\n"
                      "    from plait.simulate.step import simulate_step\n    import numpy\n")
    assert imported_units(module) == {"cost", "units", "simulate"}


def test_every_module_imports() -> None:
    """The quick tier touches every module: each imports (optional libraries installed by the test extra)."""
    import importlib

    for path in sorted(SRC.rglob("*.py")):
        name = ".".join(("plait", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        if name != "plait.__main__":
            importlib.import_module(name)


HEAVY = ("torch", "torchrec", "torch_geometric", "transformers", "torchtitan", "torchao")
"""Optional libraries of the extras: imported at module level only by the runtime's and the kinds' workers."""


def test_only_the_runtime_imports_the_heavy_libraries_at_module_level() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if unit_of(path) in ("run", "workloads"):
            continue
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(SRC)}: {n}" for n in names if n.split(".")[0] in HEAVY]
    assert found == []
