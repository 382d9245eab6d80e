"""Data-parallel GNN training on 2 gloo ranks (issue 18): PyG's GraphSAGE, GCN, GAT and a graph transformer over
plait's sampler on a generated graph give the losses of one process training the same parts' batches, and every
byte the feature fetch sends equals the cost model's accounting of the ids each part asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.cost.gnn import rank_fetch_bytes
from tests.ranks import run_ranks

FEATURES, STEPS = 16, 3


@pytest.mark.parametrize("kind, cache, heads", [("sage", 0.0, 1), ("gcn", 0.1, 1), ("gat", 0.0, 4),
                                               ("transformer", 0.1, 2)])
def test_two_ranks_train_as_one_process_and_fetch_the_counted_bytes(tmp_path: Path, kind: str, cache: float,
                                                                    heads: int) -> None:
    pytest.importorskip("torch_geometric")
    from plait.run.gnn import parser, train

    argv = ["--kind", kind, "--heads", str(heads), "--cache", str(cache), "--features", str(FEATURES), "--steps",
            str(STEPS)]
    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.run.gnn", *argv, "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    single = train(parser().parse_args([*argv, "--out", str(tmp_path / "ref.json")]), reference=2)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    assert len(set(measured["losses"])) == STEPS  # the model moves
    for step, asked in enumerate(single["requests"]):
        assert sum(asked[0]) + sum(asked[1]) > 0  # features do move
        for rank in (0, 1):
            assert measured["bytes_sent"][rank][step] == rank_fetch_bytes(asked, rank, FEATURES)


@pytest.mark.parametrize("kind, heads", [("sage", 1), ("gcn", 1), ("gat", 4), ("transformer", 4)])
def test_the_cost_models_parameters_are_the_runtimes(kind: str, heads: int) -> None:
    """The parameter count the cost model charges gradients and Adam for equals PyG's modules' count, 3 layers."""
    pytest.importorskip("torch_geometric")
    from plait.run.gnn import build_model
    from plait.workload.gnn import GnnModel, GraphStats

    graph = GraphStats(nodes=10, edges=10, features=16, classes=4, train_nodes=10, degree_exponent=2.5, max_degree=5)
    model = GnnModel(kind=kind, layers=3, hidden=32, fanouts=(1, 1, 1), heads=heads)  # type: ignore[arg-type]
    built = build_model(kind, 16, 32, 4, 3, heads)
    assert model.params(graph) == sum(p.numel() for p in built.parameters())


def test_plait_run_trains_a_gnn_file_as_one_process_would() -> None:
    """``plait run --model examples/gnn-tiny.toml``: the ranks' losses printed beside one process's, equal to 6
    decimals, and bytes sent every step."""
    import re
    import subprocess
    import sys

    pytest.importorskip("torch_geometric")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--model", "examples/gnn-tiny.toml", "--gpus", "2",
                           "--global-batch", "64", "--steps", "3"], check=False, cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"│\s+(\d)\s+│\s+([\d.]+)\s+│\s+([\d.]+)\s+│\s+([\d,]+) / ([\d,]+)\s+│\s+([\d,]+)", done.stdout)
    assert len(rows) == 3
    assert all(ranks == single for _, ranks, single, *_ in rows)
    assert all(int(a.replace(",", "")) > 0 for *_, a, _b, _e in rows)


@pytest.mark.parametrize("strategy", ["host_features", "replicated", "full_graph", "partition_local", "llcg"])
def test_plait_run_refuses_the_strategies_it_only_costs_by_name(strategy: str) -> None:
    from tests.inprocess import cli

    code, _, err = cli(["run", "--model", "examples/gnn-tiny.toml", "--gpus", "2", "--global-batch", "64",
                        "--gnn-strategy", strategy, "--dry-run"])
    assert code != 0 and f"--gnn-strategy {strategy}: plait run trains sampled_dp" in err and "Traceback" not in err
