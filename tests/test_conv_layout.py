"""Channels-first convolutions on tensor cores pay layout transposes (plait.workloads.traced.timing.layout_transpose_s);
channels-last ones and CUDA-core (fp32) ones do not."""

from __future__ import annotations

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.catalog import get_cluster
from plait.workloads.traced.timing import layout_transpose_s


def test_a_transpose_reads_and_writes_every_activation_byte_once() -> None:
    acc = get_cluster("dgx-a100-ib").accelerator
    # 1 GB of activations: read 1 GB and write 1 GB at the sustained HBM rate
    assert layout_transpose_s(1e9, acc) == pytest.approx(2e9 / memory_bytes_per_s(acc))


@pytest.mark.parametrize(("precision", "slug", "transposes"), [
    ("fp16", "dgx-a100-ib", True), ("tf32", "dgx-a100-ib", True), ("fp32", "dgx1-v100", False)])
def test_nchw_costs_more_only_where_tensor_cores_run_the_convolutions(precision: str, slug: str,
                                                                      transposes: bool) -> None:
    pytest.importorskip("transformers")
    from plait.engine.catalog import get_engine
    from plait.plan.plan import Plan
    from plait.predict.intervals import step_interval_s
    from plait.workloads.traced.cost import TracedRunFacts, estimate_traced
    from plait.workloads.traced.tracing import storage_dtype, trace

    work, cluster = trace("plait.workload.zoo:resnet50", dtype=storage_dtype(precision)), get_cluster(slug)
    plan = Plan(dp_replicate=1, sharding="none", micro_batch=64, global_batch=64, precision=precision,
                optimizer="sgd")
    nchw = estimate_traced(work, cluster, plan, get_engine(), step_interval_s, TracedRunFacts(channels_last=False))
    nhwc = estimate_traced(work, cluster, plan, get_engine(), step_interval_s, TracedRunFacts(channels_last=True))
    if transposes:  # MosaicML's Channels Last card: ~30% on ResNet-50 (V100, A100); the transposes are memory-bound
        assert 1.1 < nchw.time.total_s / nhwc.time.total_s < 1.6
    else:
        assert nchw.time.total_s == pytest.approx(nhwc.time.total_s)
    said = [w for w in nchw.warnings if "NCHW" in w]  # the user is told which layout was assumed where it counts
    assert len(said) == int(transposes) and not [w for w in nhwc.warnings if "NCHW" in w]
    assert any("no data loader costed" in w for w in nchw.warnings)
