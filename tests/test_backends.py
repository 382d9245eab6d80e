"""Collective back-ends (plait.engine.backends) and the gloo/MPI comparison of ``plait calibrate --backends``."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from conftest import toy_cluster_mapping

from plait.cli.main import run_cli
from plait.cost import collectives as coll
from plait.engine.backends import BACKENDS, backend_facts, with_backend
from plait.errors import ConfigError
from plait.hardware.catalog import cluster_from_mapping
from plait.hardware.cluster import Cluster
from plait.run.calibrate_mpi import fit_alpha_beta, mpi_allreduce_times, mpiexec

GB = 1e9


def test_no_backend_or_the_clusters_own_is_the_cluster_itself(toy_cluster: Cluster) -> None:
    assert with_backend(toy_cluster, "") is toy_cluster
    assert with_backend(toy_cluster, "nccl") is toy_cluster
    assert with_backend(toy_cluster, "gloo") is with_backend(toy_cluster, "gloo")  # built once per cluster


def test_every_backend_loads_with_a_source_per_figure() -> None:
    for name in BACKENDS:
        facts = backend_facts(name)
        assert facts.source
        assert facts.nccl_protocols == (name == "nccl")


def test_mpi_all_reduce_is_alpha_beta_by_hand_without_nccls_ll_protocol() -> None:
    """Toy tiers with a 10 us step: 8 ranks in one node, ring bandwidth 2 (g-1)/g, min(ring, tree) steps."""
    raw = toy_cluster_mapping()
    for tier in raw["tiers"]:
        tier["latency_us"] = 10.0
    nccl = cluster_from_mapping(raw, "toy")
    mpi = with_backend(nccl, "mpi")
    view = backend_facts("mpi").scale_up
    assert view is not None and view.latency_factor is not None
    alpha_s = 10e-6 * view.latency_factor.value
    small, large = 4096.0, 1 * GB
    for size in (small, large):
        steps = min(2 * 7, 2 * 3)  # tree: 2 log2(8)
        expected = steps * alpha_s + 2 * 7 / 8 * size / (100 * GB * view.bandwidth.at(size))
        assert coll.all_reduce_s(size, coll.group_link(mpi, 8, 1)) == pytest.approx(expected)
    # NCCL on the same tiers takes its LL protocol for the small buffer: faster than its own 6 steps of 10 us
    assert coll.all_reduce_s(small, coll.group_link(nccl, 8, 1)) < 6 * 10e-6


def test_gloo_inside_a_node_is_capped_by_its_host_rate_by_hand(toy_cluster: Cluster) -> None:
    view = backend_facts("gloo").scale_up
    assert view is not None and view.latency_us is not None and view.bus_cap_gb_per_s is not None
    gloo = with_backend(toy_cluster, "gloo")
    expected = 6 * view.latency_us.value * 1e-6 + 2 * 7 / 8 * GB / (view.bus_cap_gb_per_s.value * GB)
    assert coll.all_reduce_s(GB, coll.group_link(gloo, 8, 1)) == pytest.approx(expected)


def test_gloo_is_slower_than_nccl_on_a_gpu_cluster_at_every_size(toy_cluster: Cluster) -> None:
    gloo = with_backend(toy_cluster, "gloo")
    for size in (4096.0, 2**20, 1 * GB):
        for group, stride in ((8, 1), (16, 1), (16, 8)):
            assert (coll.all_reduce_s(size, coll.group_link(gloo, group, stride))
                    > coll.all_reduce_s(size, coll.group_link(toy_cluster, group, stride)))


def test_a_cluster_measured_on_gloo_has_no_other_view() -> None:
    gloo_measured = cluster_from_mapping({**toy_cluster_mapping(), "collective_backend": "gloo"}, "toy")
    with pytest.raises(ConfigError, match="relative to NCCL"):
        with_backend(gloo_measured, "mpi")
    with pytest.raises(ConfigError, match="must be one of"):
        with_backend(gloo_measured, "ucx")


def test_alpha_beta_fit_recovers_a_line_exactly() -> None:
    sizes = [2**12, 2**16, 2**20, 2**24]
    fit = fit_alpha_beta("gloo", 2, sizes, [50e-6 + m / 2e9 for m in sizes])
    assert fit.alpha_s == pytest.approx(50e-6)
    assert fit.buffer_bytes_per_s == pytest.approx(2e9)
    assert fit.bus_bytes_per_s == pytest.approx(2e9)  # 2 (g-1)/g = 1 at g = 2


@pytest.mark.slow
@pytest.mark.skipif(mpiexec() is None, reason="needs mpi4py and mpiexec (pip install 'plait[mpi]')")
def test_mpi_allreduce_runs_on_two_ranks() -> None:
    times = mpi_allreduce_times(2, [4096, 1 << 20], rounds=1, timeout_s=60)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert times[1] > times[0]  # 256x the bytes


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(argv)
    return code, out.getvalue(), err.getvalue()


def test_estimate_backend_json_sets_the_step_beside_the_clusters_own() -> None:
    layout = ["estimate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100-ib", "--gpus", "16", "--sharding", "none",
              "--global-batch", "512", "--json"]
    code, out, _ = _cli([*layout, "--backend", "gloo"])
    assert code == 0
    found = json.loads(out)
    own_code, own_out, _ = _cli(layout)
    assert own_code == 0
    assert found["backend"]["own_step_time_s"] == json.loads(own_out)["step_time_s"]  # the default is untouched
    assert found["step_time_s"] == found["backend"]["step_time_s"] > found["backend"]["own_step_time_s"]
    assert "[gloo collectives]" in found["cluster"]


@pytest.mark.parametrize("argv,fragment", [
    (["estimate", "--backend", "ucx"], "must be one of nccl, mpi, gloo, grpc"),
    (["estimate", "--model", "examples/dlrm-small.toml", "--gpus", "16", "--backend", "mpi"], "only a transformer"),
])
def test_estimate_refuses_a_backend_it_cannot_apply(argv: list[str], fragment: str) -> None:
    code, _, err = _cli(argv)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
