"""The share of a core a calibration rank gets (:func:`plait.run.calibrate_compute.core_share`): CPU time over wall
time, so a rank that computes reads well above one that only waits."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")


def test_a_computing_thread_gets_a_share_a_waiting_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from plait.run.calibrate_compute import core_share

    computing = core_share("cpu", seconds=0.2)
    monkeypatch.setattr(torch, "mm", lambda a, b: time.sleep(0.005))  # the op waits instead of computing
    waiting = core_share("cpu", seconds=0.05)
    assert 0.0 <= waiting < 0.05 and waiting < computing <= 1.0
    assert core_share("cuda") == 1.0  # a GPU's host thread waits on the device: no share to read
