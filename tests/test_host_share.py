"""Server ranks sharing CPU workers' cores: the server's work per exchange, the processor-sharing factor, and the
core count calibrate records, on hand-computed cases."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.async_host import worker_own_s
from plait.cost.async_sgd import message_s
from plait.cost.host_share import node_processes, server_cpu_s, sharing_factor
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster, resolve_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.run.host_cores import physical_cores
from plait.sync import parse
from plait.workload.catalog import resolve_model

ROOT = Path(__file__).resolve().parents[1]
CORES = "assumed: a test's core count"


def _cpu_node(cores: int):  # type: ignore[no-untyped-def]
    """The calibrated 2-rank CPU node of the examples, with ``cores`` host cores (0: not stated)."""
    return replace(resolve_cluster(str(ROOT / "examples" / "cpu-node.toml")), host_cores_per_node=cores,
                   host_cores_source=CORES if cores else "")


def test_server_work_and_sharing_by_hand() -> None:
    """Cycle 10 s alone (compute 8, two 0.5 s messages, a 1 s update). One server: each worker computes 8 and
    handles its two message ends (2 x 0.25), the server both workers' exchanges (2 x (0.25 + 0.25 + 1)): 20
    CPU-seconds over 2 cores, exactly the cycle (the server works only while a worker waits). Two servers (each a
    piece with these times): the workers 2 x (8 + 4 x 0.25), the servers 2 x 2 x 1.5; 24 over 2 cores, 1.2 x."""
    assert server_cpu_s(0.5, 1.0) == 1.5
    assert sharing_factor(_cpu_node(2), 2, 1, 10.0, 8.0, 0.5, 1.0) == 1.0
    assert sharing_factor(_cpu_node(2), 2, 2, 10.0, 8.0, 0.5, 1.0) == pytest.approx(24 / 20)
    # a core per process, or no core count stated: nothing shared
    assert sharing_factor(_cpu_node(4), 2, 2, 10.0, 8.0, 0.5, 1.0) == 1.0
    assert sharing_factor(_cpu_node(0), 2, 2, 10.0, 8.0, 0.5, 1.0) == 1.0
    # the cores idle part of the cycle anyway (a long cycle): processor sharing does not slow it
    assert sharing_factor(_cpu_node(2), 2, 2, 30.0, 8.0, 0.5, 1.0) == 1.0


def test_workers_fill_nodes_and_servers_spread_over_them() -> None:
    node = _cpu_node(2)  # 2 ranks a node
    assert node_processes(node, 2, 1) == (2, 1)
    assert node_processes(node, 6, 4) == (2, 2)  # 3 nodes, 4 servers: at most 2 on one


def test_gpu_workers_leave_the_servers_their_idle_cores() -> None:
    """On a GPU node the workers compute on the GPUs: no sharing, even with fewer host cores than processes."""
    dgx = replace(get_cluster("dgx-a100-ib"), host_cores_per_node=4, host_cores_source=CORES)
    assert sharing_factor(dgx, 8, 4, 1.0, 0.9, 0.01, 0.01) == 1.0


def test_the_estimate_stretches_by_the_factor_on_a_shared_cpu_node() -> None:
    """The example plan on the CPU node with async_ps through 2 servers (4 processes): with 4 cores a worker's
    cycle is its compute b, its own exchange work w, two messages and the update of one piece; with 2 cores they
    serve 2 (b + w + 2t) + 2 x 2 (t + a) CPU-seconds a cycle, so the cycle is b + w + 4t + 2a. One server on 2
    cores: the cycle alone."""
    model = resolve_model(str(ROOT / "examples" / "tiny-model.toml"))

    def cycle(spec: str, cores: int) -> tuple[float, float]:  # (compute, compute and exchange)
        plan = Plan(dp_replicate=2, micro_batch=4, global_batch=8, dp_sync=parse(spec)).with_seq_len(model.seq_len)
        time = estimate(model, _cpu_node(cores), plan, engine=get_engine("plait")).time
        return time.compute_s, time.compute_s + time.dp_comm_s

    two = "async_ps:staleness=4,servers=2"
    transfer, apply = message_s(_cpu_node(2), parse(two), 2, 1, 180_800)
    own = worker_own_s(_cpu_node(2), parse(two), 180_800, 39)  # the tiny model's 39 tensors
    busy, alone = cycle(two, 4)
    assert alone == pytest.approx(busy + own + 2 * transfer + apply, rel=0.01)
    assert cycle(two, 2)[1] == pytest.approx(busy + own + 4 * transfer + 2 * apply, rel=0.01)
    assert cycle(two, 0) == pytest.approx((busy, alone), rel=1e-12)
    assert cycle("async_ps:staleness=4", 2) == pytest.approx(cycle("async_ps:staleness=4", 3), rel=1e-12)


def test_calibrate_counts_physical_cores_once() -> None:
    """Two cores with two SMT threads each: 4 logical CPUs, 2 physical cores; an affinity mask of one thread per
    core still holds 2; text without core ids counts every allowed CPU."""
    smt = "\n\n".join(f"processor\t: {p}\nphysical id\t: 0\ncore id\t\t: {p % 2}" for p in range(4))
    assert physical_cores(smt, {0, 1, 2, 3}) == 2
    assert physical_cores(smt, {0, 1}) == 2
    assert physical_cores(smt, {0, 2}) == 1
    assert physical_cores("", {0, 1, 2}) == 3
    assert math.isfinite(physical_cores(Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else "",
                                        {0}))
