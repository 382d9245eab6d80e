"""Pictures of a schedule: the CDF of job completion times per policy and the GPUs held over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from plait.schedule.result import ScheduleResult

HOUR_S = 3600.0


def write_plots(results: list[ScheduleResult], folder: Path) -> list[Path]:
    """``jct_cdf.png`` and ``utilization.png`` of ``results`` in ``folder``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = np.sort(r.jcts_s()) / HOUR_S
        ax.step(jct, np.arange(1, len(jct) + 1) / max(1, len(jct)), where="post", label=r.policy)
    ax.set_xscale("log")
    ax.set(xlabel="job completion time (h)", ylabel="fraction of jobs", title="JCT CDF")
    ax.legend()
    fig.tight_layout()
    paths = [folder / "jct_cdf.png"]
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for r in results:
        times, held = r.utilization_over_time()
        ax.step(times / HOUR_S, held / r.capacity_gpus, where="post", label=r.policy)
    ax.set(xlabel="time (h)", ylabel="GPUs held / capacity", title="cluster utilization", ylim=(0, 1.05))
    ax.legend()
    fig.tight_layout()
    paths.append(folder / "utilization.png")
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)
    return paths
