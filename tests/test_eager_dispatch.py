"""One host cost per eager PyTorch op across workloads (plait.hardware.eager_dispatch, plait.cost.host.issue_s): the
launch call (HolisticTraceAnalysis' 5-20 us runtime event, 10 us) plus the framework's dispatch before it (13.3 us,
measured by benchmarks/dit_eager_host.py), paid where the engine runs eager ops and nowhere else."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.host import dense_layer_kernels, issue_s, layer_host_s
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.workload.catalog import get_model
from plait.workloads.gnn.dispatch import host_step_s, step_ops
from plait.workloads.gnn.model import GnnModel
from plait.workloads.traced.row_framework import RowFramework, parse_framework
from plait.workloads.traced.validate import row_engine


def _setup(engine: str) -> Setup:
    model = get_model("llama3-8b")
    plan = Plan(tp=1, pp=1, dp_replicate=8, micro_batch=1, global_batch=8).with_seq_len(model.seq_len)
    return Setup(model=model, cluster=get_cluster("dgx-h100-ib"), plan=plan, framework=get_engine(engine).framework)


@pytest.mark.parametrize(("engine", "per_kernel_us"), [
    ("torchtitan", 10.0 + 13.3),  # eager modules: dispatch, then the launch call
    ("torchtitan[compile=true]", 10.0),  # compiled blocks call their kernels from generated code
    ("llm-foundry", 10.0 + 13.3),
    ("megatron-core", 10.0),  # not charged: no measured per-op host time of its fused modules
])
def test_a_transformer_layer_pays_dispatch_only_where_its_engine_runs_eager_ops(engine: str,
                                                                                 per_kernel_us: float) -> None:
    setup = _setup(engine)
    fwd_s, bwd_s = layer_host_s(setup, moe_layer=False)
    kernels = dense_layer_kernels(setup)
    assert fwd_s == pytest.approx(kernels * per_kernel_us * 1e-6)
    assert bwd_s == pytest.approx(2 * kernels * per_kernel_us * 1e-6)


def test_a_graphed_eager_engine_pays_one_launch_and_no_dispatch() -> None:
    s = _setup("torchtitan")
    graphed = replace(s, framework=replace(s.framework, cuda_graph_layers=True))
    assert layer_host_s(graphed, moe_layer=False) == pytest.approx((10e-6, 10e-6))


def _row(framework: str) -> RowFramework:
    return parse_framework(framework, "test")


def test_gnn_ops_and_classic_pytorch_rows_use_the_same_per_op_cost() -> None:
    """A GNN step's ops are eager PyTorch: 2 PyG SAGE layers (26 ops each), the loss (5) and Adam over 6 tensors
    (9 each) = 111 ops at 23.3 us on a DGX-1's V100. Classic rows: PyTorch's pay dispatch, TensorFlow's and
    MXNet's do not (their executors' host time is not sourced)."""
    acc = get_cluster("dgx1-v100").accelerator
    model = GnnModel(kind="sage", layers=2, hidden=16, fanouts=())
    assert step_ops(model, "pyg") == 111
    assert host_step_s(model, "pyg", acc) == pytest.approx(111 * 23.3e-6)
    assert issue_s(acc, eager=False) == pytest.approx(10e-6)
    assert row_engine(_row("PyTorch (NGC pytorch-21.03, torch DDP)")).framework.eager_dispatch
    assert not row_engine(_row("MXNet (NGC mxnet-20.12-py3, Horovod)")).framework.eager_dispatch
    assert not row_engine(_row("TensorFlow 1.x (tf_cnn_benchmarks)")).framework.eager_dispatch


def test_packaged_accelerators_take_the_measured_dispatch_and_descriptions_state_theirs() -> None:
    """The packaged launch figure is the launch call alone (HolisticTraceAnalysis), so eager ops add the measured
    13.3 us; a description's own ``host_launch_us`` is its whole per-op time (as plait calibrate times it) unless it
    states its dispatch apart."""
    from plait.hardware.catalog import cluster_from_mapping, get_accelerator
    from tests.conftest import toy_cluster_mapping

    def dispatch_us(**efficiency: dict[str, object]) -> float:
        table = toy_cluster_mapping()
        table["accelerator"]["efficiency"].update(efficiency)
        return cluster_from_mapping(table, "toy").accelerator.efficiency.eager_dispatch_us.value

    assert get_accelerator("a100-80gb").efficiency.eager_dispatch_us.value == 13.3
    launch = {"value": 7.0, "source": "assumed: a test's host"}
    assert dispatch_us(host_launch_us=launch) == 0.0
    assert dispatch_us(host_launch_us=launch, eager_dispatch_us={"value": 2.0, "source": "assumed: a test"}) == 2.0
