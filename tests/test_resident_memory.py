"""A rank's measured memory is its own: Linux keeps ``ru_maxrss`` across fork and exec, ``VmHWM`` it does not.

torchrun forks every rank from an agent that has imported torch, and calibrate spawns its ranks from a process
that has timed large tensors, so ``getrusage`` would report at least the launcher's resident size at the fork.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

pytest.importorskip("torch")

PARENT_MIB = 768


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is in Linux's /proc/self/status")
def test_a_child_reports_its_own_peak_not_its_launchers() -> None:
    ballast = b"\x01" * (PARENT_MIB * 2**20)  # every page written: resident in this process
    code = ("import resource; from plait.run.train import resident_bytes; "
            "print(resident_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    own, inherited = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                               check=True).stdout.split())
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 >= PARENT_MIB * 2**20
    assert inherited >= PARENT_MIB * 2**20  # what getrusage would have reported for the child
    assert own < inherited and own < PARENT_MIB * 2**20  # the child imported torch (~0.25 GiB), no ballast
    del ballast
