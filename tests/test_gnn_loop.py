"""The training loop around a GNN (plait.workloads.gnn.loop): each fact a ``[loop]`` table states is charged by the
estimate itself, so ``plait estimate`` of a job prices what ``plait validate gnn`` prices for the same job."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.workloads.gnn.compute import GnnLibrary, input_cast_s
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.dgl_reverse import rebuild_bytes
from plait.workloads.gnn.host import host_step, loader_rates, loaders
from plait.workloads.gnn.loop import GnnLoop
from plait.workloads.gnn.model import GnnModel, GnnSpec, read_gnn
from plait.workloads.gnn.predict import predict_gnn
from plait.workloads.gnn.simulate import gnn_timeline
from plait.workloads.gnn.staging import loop_threads, pageable_extra_s
from plait.workloads.gnn.validate import graphs, predict_row
from tests.gnn_row_files import first_row, job_toml

V100 = get_cluster("dgx1-v100")
PRODUCTS = graphs()["ogbn-products"]


def _spec(kind: str, loop: GnnLoop, fanouts: tuple[int, ...] = (15, 10, 5)) -> GnnSpec:
    model = GnnModel(kind=kind, layers=3, hidden=256, fanouts=fanouts)  # type: ignore[arg-type]
    return GnnSpec(name="p", graph=PRODUCTS, model=model, loop=loop)


@pytest.mark.parametrize(
    ("kind", "library", "rebuilds"),
    [("gat", "dgl", 2 * 3), ("sage", "spmm", 1 * 2), ("gcn", "dgl", 0), ("gat", "pyg", 0)],
)
def test_a_dgl_graph_holding_its_coo_rebuilds_the_reversed_csc_in_each_backward(
    kind: str, library: str, rebuilds: int
) -> None:
    """Full graph, 3 layers: GATConv reverses twice a layer (u_mul_e, u_add_v), DGL's SAGEConv once but not at its
    first layer (raw inputs, no gradient), GCN not at all as DGL's layers are read; PyG never. Each rebuild streams
    rebuild_bytes(N, 2E) at the HBM's rate; a graph holding its CSR and CSC pays none."""
    lib: GnnLibrary = library  # type: ignore[assignment]
    coo, held = (
        estimate_gnn(_spec(kind, GnnLoop(graph_formats=f)), V100, 1, 1, "full_graph", library=lib)
        for f in ("coo", "csr,csc")
    )
    rebuild_s = rebuild_bytes(PRODUCTS.nodes, 2 * PRODUCTS.edges) / memory_bytes_per_s(V100.accelerator)
    assert coo.epoch_s - held.epoch_s == pytest.approx(rebuilds * rebuild_s, rel=1e-9, abs=1e-12)


def test_a_loop_copying_from_pageable_memory_pays_the_faults_and_the_staged_copy() -> None:
    """host_features on 8 V100s of a node: the pageable copy adds what staging.py prices for the fetched bytes, on
    the loop's share of the node's cores."""
    pinned, pageable = (
        estimate_gnn(_spec("sage", GnnLoop(copy_from=c)), V100, 8, 1000, "host_features", library="dgl")
        for c in ("pinned", "pageable")
    )
    extra = pageable_extra_s(pinned.fetch_bytes, V100, loop_threads(V100, 8))
    assert extra > 0 and pageable.fetch_s - pinned.fetch_s == pytest.approx(extra, rel=1e-9)


def test_a_host_loader_feeds_the_trainer_as_host_py_composes_them() -> None:
    """SALIENT (threads slice fp16 rows into pinned memory, copy pipelined) on one V100: the step is host.py's
    composition of its workers and the trainer, whose own step also casts the fp16 rows to fp32 on the GPU."""
    loop = GnnLoop(loader="salient", workers=20, feature_bytes=2, ranks_per_node=1)
    spec = _spec("sage", loop)
    fed = estimate_gnn(spec, V100, 1, 1024, "host_features", library="pyg_sparse")
    bare = estimate_gnn(replace(spec, loop=GnnLoop()), V100, 1, 1024, "replicated", library="pyg_sparse")
    salient = loaders()["salient"]
    assert bare.batch is not None
    cast_s = input_cast_s(bare.batch.nodes, PRODUCTS.features, 2, V100.accelerator)
    trainer_s = max(bare.compute_s + bare.all_reduce_s + bare.optimizer_s + cast_s, bare.host_s)
    workers = min(20, V100.host_cores_per_node)
    step = host_step(
        bare.batch,
        salient,
        loader_rates(salient, graphs()),
        workers,
        V100,
        PRODUCTS.features,
        2,
        trainer_s,
        loop_threads(V100, 1, workers),
        gpus_on_node=1,
    )
    assert fed.epoch_s == pytest.approx(step.epoch_s(bare.steps_per_epoch), rel=1e-12)


def test_a_gnn_file_with_a_loop_table_estimates_what_validation_predicts(tmp_path: Path) -> None:
    """Quiver's DGL example row (DGL's CPU sampler, 5 workers, features in host memory, one RTX 3090) written as a GNN
    file with a [loop] table: plait estimate's path gives the row's prediction."""
    row = first_row(tmp_path, lambda r: r["source_id"] == "QUIVER_DGL_EX" and r["loader"] == "dgl-cpu")
    toml = job_toml(tmp_path, row, PRODUCTS,
                    f'[loop]\nloader = "dgl-cpu"\nworkers = {row["workers"]}\nranks_per_node = 1\n')
    gpus, batch = int(row["gpus"]), int(row["batch_per_gpu"])
    job = predict_gnn(read_gnn(toml), get_cluster("rtx3090-workstation"), gpus, gpus * batch, "host_features")
    assert job.library == "dgl"
    assert 1.0 / job.estimate.epoch_s == predict_row(row, graphs()).predicted_per_s


@pytest.mark.parametrize(
    ("loop", "rule"),
    [
        ({"graph_formats": "csr"}, "graph_formats='csr' must be one of coo, csr,csc"),
        ({"loader": "salient", "copy_from": "pageable"}, "copy_from='pageable' is the loop's own copy"),
        ({"loader": "salient", "feature_bytes": 3}, "feature_bytes=3 must be one of 1, 2, 4, 8"),
        ({"workers": 8}, "workers=8 are read only with a loader"),
        ({"loader": "salient", "workers": 0}, "workers=0 must be >= 1"),
        ({"ranks_per_node": -1}, "ranks_per_node=-1 must be >= 0"),
    ],
)
def test_bad_loop_values_are_one_line(loop: dict[str, object], rule: str) -> None:
    with pytest.raises(ConfigError, match=rule.replace("(", r"\(").replace(")", r"\)")) as caught:
        GnnLoop(**loop)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("loop", "strategy", "library", "rule"),
    [
        (GnnLoop(loader="nope"), "replicated", "", "loader='nope' must be one of"),
        (GnnLoop(loader="salient"), "sampled_dp", "", "loader salient feeds the replicated or host_features"),
        (GnnLoop(loader="salient"), "replicated", "dgl", "library='dgl': loader salient samples and trains as"),
        (GnnLoop(loader="salient", ranks_per_node=2), "replicated", "", "ranks_per_node=2 must be <= the 1 ranks"),
    ],
)
def test_a_loader_the_job_cannot_use_is_one_line(loop: GnnLoop, strategy: str, library: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        predict_gnn(_spec("sage", loop), V100, 1, 1024, strategy, library=library)


def test_a_loaders_narrower_rows_take_less_of_the_gpu_memory() -> None:
    """SALIENT's loader on one V100, its table replicated on the GPU: fp16 rows halve the table (N x F x 2 bytes
    fewer), while the batch's fp16 rows sit beside their fp32 cast (B x F x 2 bytes more)."""
    fp16, fp32 = (
        estimate_gnn(
            _spec("sage", GnnLoop(loader="salient", feature_bytes=b)), V100, 1, 1024, "replicated", library="pyg_sparse"
        )
        for b in (2, 4)
    )
    assert fp16.batch is not None
    saved = 2 * PRODUCTS.nodes * PRODUCTS.features - 2 * fp16.batch.nodes * PRODUCTS.features
    assert fp32.memory_bytes - fp16.memory_bytes == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize(
    ("loop", "strategy", "library", "note"),
    [
        (GnnLoop(copy_from="pageable"), "replicated", "pyg", "copy_from='pageable' has no effect with replicated"),
        (GnnLoop(copy_from="pageable"), "host_features", "pyg", ""),
        (GnnLoop(graph_formats="csr,csc"), "full_graph", "pyg", "graph_formats='csr,csc' has no effect"),
        (GnnLoop(graph_formats="csr,csc"), "full_graph", "dgl", ""),
        (GnnLoop(ranks_per_node=1), "sampled_dp", "pyg", "ranks_per_node=1 has no effect with sampled_dp"),
    ],
)
def test_a_loop_option_the_job_does_not_read_is_said(loop: GnnLoop, strategy: str, library: str, note: str) -> None:
    """Said in the estimate's notes (not refused: plait plan tries every strategy with one spec)."""
    job = predict_gnn(_spec("sage", loop), V100, 1, 1024, strategy, library=library)
    assert len(job.notes) == (1 if note else 0) and all(note in n for n in job.notes)


def test_a_loaders_timeline_runs_its_workers_beside_the_loop() -> None:
    """SALIENT on one V100: its workers' share of a batch on the host lane from the step's start, beside the loop
    (not before it); nothing drawn ends after the step, and the slower of the two ends at it (host.py's steady
    step)."""
    loop = GnnLoop(loader="salient", workers=20, feature_bytes=2, ranks_per_node=1)
    est = estimate_gnn(_spec("sage", loop), V100, 1, 1024, "host_features", library="pyg_sparse")
    spans = gnn_timeline(est, 1).spans
    assert [(s.kind, s.start) for s in spans if s.stream == "host"] == [("loader sampling", 0.0)]
    assert min(s.start for s in spans if s.stream != "host") == 0.0
    assert max(s.end for s in spans) == pytest.approx(est.step_s, rel=1e-12)


def test_a_host_bound_winner_is_said_to_be_mostly_dispatch() -> None:
    """GraphSAGE on ogbn-products, 4 H100s, 32 seeds a rank: the device's parts are shorter than the host's dispatch
    of the step's operations (the step's floor), so the search's summary names the dispatch, at 100% of the step."""
    from io import StringIO

    from rich.console import Console

    from plait.workloads.gnn.predict import search_gnn
    from plait.workloads.gnn.render import print_gnn_search

    spec = _spec("sage", GnnLoop())
    ranked, apart, refused = search_gnn(spec, get_cluster("dgx-h100-ib"), 4, 128)
    best = ranked[0].estimate
    assert best.host_s == best.step_s > best.device_s  # host-bound, as the test means to show
    out = StringIO()
    print_gnn_search(Console(file=out, width=300), ranked, apart, refused)
    assert "its step is mostly host dispatch (100%)" in out.getvalue()
