"""Data-parallel GNN training on 2 gloo ranks: PyG's GraphSAGE, GCN, GAT and a graph transformer over
plait's sampler on a generated graph give the losses of one process training the same parts' batches, and every
byte the feature fetch sends equals the cost model's accounting of the ids each part asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.workloads.gnn.cost import rank_fetch_bytes
from tests.ranks import run_ranks

FEATURES, STEPS = 16, 3


@pytest.mark.slow
@pytest.mark.parametrize("kind, cache, heads", [("sage", 0.0, 1), ("gcn", 0.1, 1), ("gat", 0.0, 4),
                                               ("transformer", 0.1, 2)])
def test_two_ranks_train_as_one_process_and_fetch_the_counted_bytes(tmp_path: Path, kind: str, cache: float,
                                                                    heads: int) -> None:
    pytest.importorskip("torch_geometric")
    from plait.run.config import read_config
    from plait.workloads.gnn.config import GnnConfig
    from plait.workloads.gnn.worker import train

    argv = ["--kind", kind, "--heads", str(heads), "--cache", str(cache), "--features", str(FEATURES), "--steps",
            str(STEPS)]
    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.workloads.gnn.worker", *argv, "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    single = train(read_config(GnnConfig, [*argv, "--out", str(tmp_path / "ref.json")]), reference=2)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    assert len(set(measured["losses"])) == STEPS  # the model moves
    for step, asked in enumerate(single["requests"]):
        assert sum(asked[0]) + sum(asked[1]) > 0  # features do move
        for rank in (0, 1):
            assert measured["bytes_sent"][rank][step] == rank_fetch_bytes(asked, rank, FEATURES)


@pytest.mark.parametrize("kind, heads", [("sage", 1), ("gcn", 1), ("gat", 4), ("transformer", 4), ("gin", 1)])
def test_the_cost_models_parameters_are_the_runtimes(kind: str, heads: int) -> None:
    """The parameter count the cost model charges gradients and Adam for equals PyG's modules' count, 3 layers."""
    pytest.importorskip("torch_geometric")
    from plait.workloads.gnn.model import GnnModel, GraphStats
    from plait.workloads.gnn.worker import build_model

    graph = GraphStats(nodes=10, edges=10, features=16, classes=4, train_nodes=10, degree_exponent=2.5, max_degree=5)
    model = GnnModel(kind=kind, layers=3, hidden=32, fanouts=(1, 1, 1), heads=heads)  # type: ignore[arg-type]
    built = build_model(kind, 16, 32, 4, 3, heads)
    assert model.params(graph) == sum(p.numel() for p in built.parameters())


@pytest.mark.slow
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


def test_host_features_runs_on_cpu_ranks_and_says_nothing_crosses_pcie() -> None:
    from tests.inprocess import cli

    code, out, err = cli(["run", "--model", "examples/gnn-tiny.toml", "--gpus", "2", "--global-batch", "64",
                          "--gnn-strategy", "host_features", "--dry-run"])
    assert code == 0, err
    assert "host_features reads each batch's features from host memory over PCIe" in out and "no link" in out


@pytest.mark.parametrize("strategy", ["partition_local", "llcg"])
def test_training_inside_the_parts_runs_as_one_process(tmp_path: Path, strategy: str) -> None:
    """partition_local (DDP over part-local batches) and LLCG (000-16: 2 local steps, the copies averaged, one server
    correction on a whole-graph batch, broadcast) on 2 gloo ranks give one process's losses within 1e-5 over 5
    steps, two averaging rounds included; the losses move."""
    pytest.importorskip("torch_geometric")
    from plait.run.config import read_config
    from plait.workloads.gnn.config import GnnLocalConfig
    from plait.workloads.gnn.local_worker import train

    argv = ["--strategy", strategy, "--steps", "5", "--local-steps", "2", "--features", str(FEATURES)]
    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.workloads.gnn.local_worker", *argv, "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())["losses"]
    single = train(read_config(GnnLocalConfig, [*argv, "--out", str(tmp_path / "ref.json")]), reference=2)["losses"]
    assert measured == pytest.approx(single, abs=1e-5)
    assert len(set(measured)) == 5


def test_llcg_corrections_change_the_model_partition_local_would_train() -> None:
    """With the same batches, LLCG's averaging and server step move the model elsewhere than DDP over the parts:
    the losses part after the first averaging round."""
    pytest.importorskip("torch_geometric")
    from plait.run.config import read_config
    from plait.workloads.gnn.config import GnnLocalConfig
    from plait.workloads.gnn.local_worker import train

    argv = ["--steps", "4", "--local-steps", "2", "--out", "unused"]
    runs = {s: train(read_config(GnnLocalConfig, ["--strategy", s, *argv]), reference=2)["losses"]
            for s in ("partition_local", "llcg")}
    assert runs["llcg"][0] == pytest.approx(runs["partition_local"][0], abs=1e-6)  # the same first batches
    assert abs(runs["llcg"][3] - runs["partition_local"][3]) > 1e-4


def test_a_matrix_bulk_samples_the_batches_the_loop_samples_one_at_a_time() -> None:
    """Matrix-based bulk sampling (000-10): four batches drawn at once through ``P = Q A`` are, node for node and
    edge for edge, the four batches :func:`plait.run.sampler.sample` draws one by one with the same generators."""
    import torch

    from plait.run.bulk_sampler import adjacency, replicated_rows, sample_bulk
    from plait.run.graph import generate
    from plait.run.sampler import batch_generator, draw_seeds, sample

    graph = generate(3000, 15000, 2, 4, 2, exponent=2.2)
    lo, hi = graph.part_range(1)
    gens = [batch_generator(7, step, 1) for step in range(4)]
    bulk = sample_bulk(replicated_rows(adjacency(graph.rowptr_N1, graph.col_E2, graph.nodes)), graph.nodes,
                       [draw_seeds(lo, hi, 24, g) for g in gens], (6, 4, 2), gens)
    for step, got in enumerate(bulk):
        gen = batch_generator(7, step, 1)
        one = sample(graph.rowptr_N1, graph.col_E2, draw_seeds(lo, hi, 24, gen), (6, 4, 2), gen)
        assert torch.equal(got.nodes_U, one.nodes_U) and torch.equal(got.edge_index_2M, one.edge_index_2M)
        assert got.new_per_hop == one.new_per_hop and got.drawn_per_hop == one.drawn_per_hop
        assert all(n > 0 for n in got.drawn_per_hop)


def test_bulks_over_a_partitioned_adjacency_train_as_one_process_and_send_the_counted_bytes(tmp_path: Path) -> None:
    """2 ranks, each holding only its part's adjacency rows, sample bulks of 2 batches by fetching the rows they
    draw from (ids out, lengths and entries back): the losses are one process's (same batches), and the bytes each
    rank sends for sampling equal :func:`plait.workloads.gnn.cost.rank_sampling_bytes` of the rows each part's
    batches draw."""
    pytest.importorskip("torch_geometric")
    from plait.run.config import read_config
    from plait.workloads.gnn.config import GnnConfig
    from plait.workloads.gnn.sampler import rank_sampling_bytes
    from plait.workloads.gnn.worker import train

    steps, bulk = 4, 2
    argv = ["--features", str(FEATURES), "--steps", str(steps), "--fanouts", "5", "3", "4"]
    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.workloads.gnn.worker", *argv, "--sampler", "matrix", "--bulk", str(bulk),
                         "--adjacency", "partitioned", "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    single = train(read_config(GnnConfig, [*argv, "--out", str(tmp_path / "ref.json")]), reference=2)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    expected = [0.0, 0.0]
    for first in range(0, steps, bulk):
        for hop in range(3):  # a bulk's hop merges its steps' rows: one exchange
            rows = [[sum(single["drawing_rows"][s][r][hop][0][p] for s in range(first, first + bulk)) for p in (0, 1)]
                    for r in (0, 1)]
            slots = [[sum(single["drawing_rows"][s][r][hop][1][p] for s in range(first, first + bulk)) for p in (0, 1)]
                     for r in (0, 1)]
            assert (rows[0][1] + rows[1][0] > 0) == (hop > 0)  # the seeds are the rank's own; their neighbours cross
            for rank in (0, 1):
                expected[rank] += rank_sampling_bytes(rows, slots, rank)
    assert measured["sampling_bytes_sent"] == expected


def test_gnnpipe_on_two_ranks_runs_as_one_process_and_sends_each_boundary_both_ways(tmp_path: Path) -> None:
    """Full-graph GraphSAGE with GNNPipe's layer pipeline (000-11): one layer per rank, 3 chunks through it with
    historical embeddings, 3 epochs: one process's losses within 1e-5, and each rank sends per epoch the boundary's
    bytes the cost model counts (:func:`plait.workloads.gnn.pipe.boundary_bytes`): rank 0 the embeddings forward, rank 1
    their gradients back."""
    pytest.importorskip("torch_geometric")
    from plait.run.config import read_config
    from plait.workloads.gnn.config import GnnPipeConfig
    from plait.workloads.gnn.model import GnnModel, GnnSpec, GraphStats
    from plait.workloads.gnn.pipe import boundary_bytes
    from plait.workloads.gnn.pipe_worker import train

    argv = ["--chunks", "3", "--steps", "3"]
    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.workloads.gnn.pipe_worker", *argv, "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    args = read_config(GnnPipeConfig, [*argv, "--out", "unused"])
    single = train(args, reference=2)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    assert measured["losses"][-1] < measured["losses"][0]
    graph = GraphStats(nodes=args.nodes, edges=args.edges, features=args.features, classes=args.classes,
                       train_nodes=args.nodes, degree_exponent=args.exponent, max_degree=args.nodes - 1)
    spec = GnnSpec(name="pipe", graph=graph, model=GnnModel(kind="sage", layers=2, hidden=args.hidden, fanouts=(1, 1)))
    (boundary,) = boundary_bytes(spec, [(0, 1), (1, 2)])
    assert measured["bytes_sent"] == [[boundary] * 3, [boundary] * 3]


def test_gnnpipe_with_one_chunk_is_plain_full_graph_training() -> None:
    """With a single chunk nothing is historical: the pipeline's epochs are PyG's full-graph GraphSAGE epochs."""
    pytest.importorskip("torch_geometric")
    import torch
    import torch.nn.functional as fn

    from plait.run.config import read_config
    from plait.run.graph import generate
    from plait.workloads.gnn.config import GnnPipeConfig
    from plait.workloads.gnn.pipe_worker import build_layers, train

    args = read_config(GnnPipeConfig, ["--chunks", "1", "--steps", "3", "--out", "unused"])
    piped = train(args, reference=2)["losses"]
    graph = generate(args.nodes, args.edges, 1, args.features, args.classes, exponent=args.exponent, seed=args.seed)
    first, second = build_layers(args.features, args.hidden, args.classes, 2)
    edge_index = torch.stack([graph.col_E2, torch.repeat_interleave(torch.arange(graph.nodes), graph.degrees())])
    opt = torch.optim.SGD([*first.parameters(), *second.parameters()], lr=args.lr)
    plain = []
    for _ in range(3):
        loss = fn.cross_entropy(second(fn.relu(first(graph.x_NF, edge_index)), edge_index), graph.y_N)
        opt.zero_grad()
        loss.backward()
        opt.step()
        plain.append(float(loss.detach()))
    assert piped == pytest.approx(plain, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind, options, extra", [
    ("sage", ["--gnn-strategy", "replicated"], ""),
    ("sage", ["--gnn-strategy", "partition_local"], "no feature moves"),
    ("sage", ["--gnn-sampler", "matrix:bulk=2,adjacency=partitioned"], "sampling over the partitioned adjacency sent"),
    ("gat", [], ""),
])
def test_plait_run_runs_each_gnn_option_beside_one_process(tmp_path: Path, kind: str, options: list[str],
                                                           extra: str) -> None:
    """Every GNN option plait run takes trains on 2 ranks and prints losses equal to one process's to 6 decimals:
    a strategy, a bulk sampler over a partitioned adjacency, a GAT model file (4 heads)."""
    import re

    from tests.inprocess import cli

    pytest.importorskip("torch_geometric")
    text = (Path(__file__).resolve().parents[1] / "examples" / "gnn-tiny.toml").read_text()
    model = tmp_path / "gnn.toml"
    model.write_text(text if kind == "sage" else text.replace('kind = "sage"', f'kind = "{kind}"\nheads = 4'))
    code, out, err = cli(["run", "--model", str(model), "--gpus", "2", "--global-batch", "64", "--steps", "2",
                          *options])
    assert code == 0, err[-2000:]
    rows = re.findall(r"│\s+(\d)\s+│\s+([\d.]+)\s+│\s+([\d.]+)\s+│", out)
    assert len(rows) == 2 and all(ranks == single for _, ranks, single in rows)
    assert extra in " ".join(out.split())


def test_plait_run_refuses_a_matrix_sampler_where_the_strategy_samples_inside_parts() -> None:
    from tests.inprocess import cli

    code, _, err = cli(["run", "--model", "examples/gnn-tiny.toml", "--gpus", "2", "--global-batch", "64",
                        "--gnn-strategy", "llcg", "--gnn-sampler", "matrix:bulk=2", "--dry-run"])
    assert code != 0 and "--gnn-sampler matrix:bulk=2: llcg samples inside each part" in err and "Traceback" not in err
