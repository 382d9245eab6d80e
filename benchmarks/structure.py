"""Structural figures of a checkout: lines per package, string-typed synchronization and workload-kind branches,
the longest CLI command, argparse parsers, function-local plait imports and package import cycles.

Run: python benchmarks/structure.py [ROOT]   (ROOT: a checkout, default this one; compare two by running it twice)
"""

import ast
import collections
import pathlib
import subprocess
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])
src = root / "src/plait"
def lines(p): return sum(1 for _ in p.open())
pk = collections.Counter()
for p in src.rglob("*.py"):
    rel = p.relative_to(src).parts; pk[rel[0] if len(rel) > 1 else "(top-level modules)"] += lines(p)
print("lines per package:", dict(sorted(pk.items())), "total", sum(pk.values()))
g = lambda pat: int(subprocess.run(f"grep -rnE '{pat}' {src} | grep -v 'def ' | wc -l", shell=True, capture_output=True, text=True).stdout)
print("parse_sync( calls:", g(r"parse_sync\("))
print("method-name branches:", g(r"\.method ==|\.method in|method == \"|startswith\(\"(palsgd|local_sgd|diloco|dreamddp|powersgd|topk|quantize|gossip|async_ps|easgd|param_server|switch)|partition\(\":\"\)\[0\] in"))
print("kind sniffs outside workload packages:", int(subprocess.run(f"grep -rnE 'is_[a-z_]+_file|is_traced_name' {src} | grep -v 'def \\|import' | grep -v '/workloads/' | wc -l", shell=True, capture_output=True, text=True).stdout))
print("ArgumentParser( in src:", g(r"ArgumentParser\("))
rows = []
for p in sorted((src / "cli").glob("*.py")):
    for n in ast.walk(ast.parse(p.read_text())):
        if isinstance(n, ast.FunctionDef) and n.name.endswith("_command"):
            b = n.body
            if isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant) and len(b) > 1: b = b[1:]
            rows.append((b[-1].end_lineno - b[0].lineno + 1, f"{p.name}:{n.name}"))
print("longest CLI command bodies:", sorted(rows, reverse=True)[:3])
fl = 0
for p in src.rglob("*.py"):
    for n in ast.walk(ast.parse(p.read_text())):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for m in ast.walk(n):
                if isinstance(m, ast.ImportFrom) and m.module and m.module.startswith("plait"): fl += 1
print("function-local plait imports:", fl)
# package cycles
edges = collections.defaultdict(set)
for p in src.rglob("*.py"):
    rel = p.relative_to(src).parts; here = rel[0] if len(rel) > 1 else p.stem
    for n in ast.walk(ast.parse(p.read_text())):
        mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module] if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 else []
        for m in mods:
            parts = m.split(".")
            if parts[0] == "plait" and len(parts) > 1 and parts[1] != here: edges[here].add(parts[1])
def reach(a):
    seen, st = set(), [a]
    while st:
        for y in edges.get(st.pop(), ()):
            if y not in seen: seen.add(y); st.append(y)
    return seen
cyc = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in reach(b)})
print("package pairs on a cycle (direct edge a->b with b reaching a):", len(cyc), cyc)
