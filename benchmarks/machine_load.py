"""The machine's load average as the speed benchmarks print it beside their CPU and wall times."""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (``os.getloadavg``) and the CPUs they are over."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f} on {os.cpu_count()} CPUs"
