"""Each micro-batch after the first adds its gradients into those held (plait.workloads.traced.accumulation): three
gradient-sized sweeps per parameter at the sustained memory bandwidth."""

from __future__ import annotations

import pytest

from plait.hardware.catalog import get_cluster
from plait.workloads.traced.accumulation import accumulation_s


def test_accumulating_a_billion_fp32_gradients_over_three_micro_batches_on_a_v100() -> None:
    acc = get_cluster("dgx1-v100").accelerator
    # 2 adds x (read held + read new + write sum) x 4 bytes x 1e9 = 24 GB at 900 GB/s x 0.862 (efficiency.toml)
    assert accumulation_s(1e9, 4.0, 3, acc) == pytest.approx(24e9 / (900e9 * 0.862))
    assert accumulation_s(1e9, 4.0, 1, acc) == 0.0  # one micro-batch: its gradient becomes .grad, no kernel
