"""The physical cores of this machine that a run's processes may share (``plait calibrate`` records them as a
cluster's ``host_cores_per_node``)."""

from __future__ import annotations

import os
from pathlib import Path


def host_cores() -> int:
    """Physical cores this process may run on (:func:`physical_cores` of its affinity mask and /proc/cpuinfo)."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    info = Path("/proc/cpuinfo")
    return physical_cores(info.read_text() if info.exists() else "", allowed)


def physical_cores(cpuinfo: str, allowed: set[int]) -> int:
    """Physical cores among the logical CPUs ``allowed``: SMT siblings (the same ``physical id`` and ``core id`` in
    the /proc/cpuinfo text ``cpuinfo``) counted once; every allowed CPU where the text does not say."""
    cores = set()
    for block in cpuinfo.split("\n\n"):
        fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in block.splitlines() if ":" in line)}
        if fields.get("processor", "").isdigit() and int(fields["processor"]) in allowed:
            cores.add((fields.get("physical id", "0"), fields.get("core id", fields["processor"])))
    return len(cores) or len(allowed)
