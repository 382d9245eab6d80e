"""Batch normalization fused with its ReLU and residual add (plait.workloads.traced.fusion, apex's NHWC kernels
``bn_fwd_nhwc``/``bn_addrelu_fwd_nhwc``), and apex's flat post-accumulation all-reduce
(plait.workloads.traced.flat_reduce, DeepLearningExamples' BERT run_pretraining.py @6fe463f take_optimizer_step);
the expected bytes are counted by hand from the kernels' operands."""

from __future__ import annotations

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.workloads.traced.flat_reduce import APEX_POST_ACCUMULATION_FP16, DDP_ONE_BUCKET_FP32
from plait.workloads.traced.fusion import fuse_bn_relu
from plait.workloads.traced.model import Kernel, TracedWorkload, Unit
from plait.workloads.traced.normalization import kernel_moved_bytes

ACT = 4.0  # one float32 activation per example


def _k(name: str, operands: int, backward: bool = False) -> Kernel:
    return Kernel(name=name, flops_per_example=0.0, fixed_bytes=0.0, bytes_per_example=operands * ACT,
                  backward=backward)


def _block() -> TracedWorkload:
    """conv, BN, ReLU, conv, BN, residual add, ReLU -- and the backward in reverse."""
    forward = [_k("convolution", 2), _k("add_", 0), _k("native_batch_norm", 2), _k("relu", 2),
               _k("convolution", 2), _k("native_batch_norm", 2), _k("add_", 3), _k("relu", 2)]
    backward = [_k("threshold_backward", 3, True), _k("native_batch_norm_backward", 3, True),
                _k("convolution_backward", 3, True), _k("threshold_backward", 3, True),
                _k("native_batch_norm_backward", 3, True), _k("convolution_backward", 3, True)]
    unit = Unit(name="block", kernels=tuple(forward + backward), params=(), saved_fixed_bytes=0.0,
                saved_bytes_per_example=0.0, output_bytes_per_example=ACT)
    return TracedWorkload(name="toy", example_shape=(1,), input_dtype="float32", dtype="float32", units=(unit,),
                          grad_order=(), unit_class="Block")


def test_fused_relus_and_adds_vanish_and_the_add_relu_reads_its_addend_and_writes_its_mask() -> None:
    fused = fuse_bn_relu(_block(), add_relu=True).units[0].kernels
    names = [k.name for k in fused]
    assert names == ["convolution", "add_", "native_batch_norm", "convolution", "native_batch_norm",
                     "native_batch_norm_backward", "convolution_backward", "native_batch_norm_backward",
                     "convolution_backward"]
    moved = [kernel_moved_bytes(k, 1) for k in fused if "batch_norm" in k.name]
    mask = ACT / 32  # one bit per 32-bit element
    # forward: 3 sweeps of 4 bytes; the add-ReLU one also reads z (4) and writes the mask
    # backward: 5 sweeps; the add-ReLU one (met first) also writes dz (4) and reads the mask
    assert moved == pytest.approx([12.0, 12.0 + ACT + mask, 20.0 + ACT + mask, 20.0])


def test_without_the_add_fusion_only_relus_right_after_a_batch_norm_fold() -> None:
    fused = fuse_bn_relu(_block(), add_relu=False).units[0].kernels
    assert [k.name for k in fused if not k.backward].count("relu") == 1  # the one after the add stays
    assert [k.name for k in fused if k.backward].count("threshold_backward") == 1  # ...and its backward
    assert sum(kernel_moved_bytes(k, 1) for k in fused) == pytest.approx(
        sum(kernel_moved_bytes(k, 1) for k in _block().units[0].kernels) - 2 * ACT - 3 * ACT)


def test_the_flat_reduce_copies_in_and_out_then_all_reduces_fp16() -> None:
    cluster = get_cluster("dgx1-v100")
    params = 1e8
    plan = Plan(dp_replicate=8, sharding="none", micro_batch=4, global_batch=32, precision="fp16")
    # in: read fp32 (4) write fp16 (2); out: read fp16 (2) write fp32 (4) -> 12 bytes per gradient
    copies_s = 12.0 * params / memory_bytes_per_s(cluster.accelerator)
    reduce_s = collective_s(cluster, "all_reduce", 8, 1, 2.0 * params)
    assert APEX_POST_ACCUMULATION_FP16.exposed_s(cluster, plan, params) == pytest.approx(copies_s + reduce_s)
    single = Plan(dp_replicate=1, sharding="none", micro_batch=4, global_batch=4, precision="fp16")
    assert APEX_POST_ACCUMULATION_FP16.exposed_s(cluster, single, params) == 0.0
    # DDP's one fp32 bucket: the comm hook's div_ reads and writes 4 bytes, then 4 bytes are all-reduced
    divide_s = 8.0 * params / memory_bytes_per_s(cluster.accelerator)
    reduce_s = collective_s(cluster, "all_reduce", 8, 1, 4.0 * params)
    assert DDP_ONE_BUCKET_FP32.exposed_s(cluster, plan, params) == pytest.approx(divide_s + reduce_s)
