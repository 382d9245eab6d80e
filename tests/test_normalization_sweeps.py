"""A batch normalization in training sweeps its activations twice each way (plait.workloads.traced.normalization):
forward 3 activation passes (x for the statistics, x again and y), backward 5 (dy and x for the sums, both again and
dx); a layer normalization's backward reads dy and x again for its weight and bias gradients (5 passes); the trace
counts each operand once (2 forward, 3 backward)."""

from __future__ import annotations

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.catalog import get_cluster
from plait.workloads.traced.model import Kernel
from plait.workloads.traced.normalization import kernel_moved_bytes
from plait.workloads.traced.timing import kernel_s


def _kernel(name: str, per_example: float, backward: bool = False) -> Kernel:
    return Kernel(name=name, flops_per_example=0.0, fixed_bytes=100.0, bytes_per_example=per_example,
                  backward=backward)


def test_batch_norm_moves_its_activations_once_per_sweep_and_its_statistics_once() -> None:
    # forward: 10 examples of x + y = 2 x 4 bytes -> 3 sweeps of 4 bytes = 120, plus 100 fixed bytes
    assert kernel_moved_bytes(_kernel("native_batch_norm", 8.0), 10) == 100.0 + 120.0
    # backward: dy, x, dx = 3 x 4 bytes -> 5 sweeps of 4 bytes = 200, plus 100 fixed bytes
    assert kernel_moved_bytes(_kernel("native_batch_norm_backward", 12.0, True), 10) == 100.0 + 200.0
    # layer norm: forward as traced, backward 5 sweeps of 4 bytes
    assert kernel_moved_bytes(_kernel("native_layer_norm", 8.0), 10) == 100.0 + 80.0
    assert kernel_moved_bytes(_kernel("native_layer_norm_backward", 12.0, True), 10) == 100.0 + 200.0
    # anything else moves its traced operands once
    assert kernel_moved_bytes(_kernel("relu", 8.0), 10) == 100.0 + 80.0


def test_a_memory_bound_batch_norm_takes_its_sweeps_at_the_sustained_bandwidth() -> None:
    acc = get_cluster("dgx1-v100").accelerator
    # 256 examples of 64 x 56 x 56 fp16 (401,408 bytes per tensor): backward 5 sweeps, 513.8 MB in all
    per_tensor = 64 * 56 * 56 * 2
    seconds = kernel_s(_kernel("native_batch_norm_backward", 3.0 * per_tensor, True), 256, acc, "fp16", 2)
    assert seconds == pytest.approx((100.0 + 5 * per_tensor * 256) / memory_bytes_per_s(acc))


def test_the_trace_counts_a_normalization_operand_once_as_the_sweeps_assume() -> None:
    """What the sweep ratios divide by: a traced BatchNorm2d over 4 x 8 x 8 float32 (1,024 bytes per example) moves
    2 tensors per example forward and 3 backward; a LayerNorm(8) over 4 rows of 8 float32 (128 bytes) 3 backward,
    plus each row's mean and reciprocal deviation (4 rows x 2 x 4 bytes)."""
    torch = pytest.importorskip("torch")
    from plait.workloads.traced.tracing import trace_factory

    def built() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 4, 1))

    work = trace_factory(built, "bn", (4, 8, 8), "float32", "float32")
    norms = {k.name: k.bytes_per_example for u in work.units for k in u.kernels if "batch_norm" in k.name}
    assert norms == {"native_batch_norm": 2 * 1024.0, "native_batch_norm_backward": 3 * 1024.0}

    def normed() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 8))

    rows = trace_factory(normed, "ln", (4, 8), "float32", "float32")
    backward = [k.bytes_per_example for u in rows.units for k in u.kernels if k.name == "native_layer_norm_backward"]
    assert backward == [3 * 128.0 + 4 * 2 * 4.0]
