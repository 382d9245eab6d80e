"""Synthetic job traces whose GPU-count and duration distributions follow published production traces.

Each family gives a job-size mix and a duration distribution (inverse CDF, interpolated in log-seconds between the
points below); a job's model is drawn from catalog models that suit its size, and its token budget is set so that it
would run for its drawn duration at its requested size on an empty cluster (plait's planner gives the speed). Jobs
arrive as a Poisson process over a window whose length makes the offered load over it equal ``load``: the GPU-seconds
the jobs would hold inside the window if each started on arrival, over the cluster's GPUs times the window
(:func:`window_s`); above 1 the queue must build during the window. The same family, count, seed, cluster and load
give the same trace.

Sources, and what was read off where (approximate wherever a figure is read by eye):

- ``philly`` (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", ATC 2019):
  durations are quantiles computed exactly from the 83,154 job run times of the Philly trace that the MLaaS paper
  plots beside PAI (alibaba/clusterdata ``cluster-trace-gpu-v2020/analysis/philly_runtime.csv``, its Fig. 4 data;
  median 1,186 s, p90 12,859 s, p99 287,283 s), floored at 10 s and capped at 10^6 s (the trace's longest job ran
  4.6 x 10^6 s). Sizes: 1 GPU 70%, 2: 10%, 4: 15%, 8: 5%, the "Philly distribution" of job sizes that Gavel
  (Narayanan et al., OSDI 2020) samples its traces from (stanford-futuredata/gavel ``scheduler/utils.py``,
  ``_generate_scale_factor``), reused by later schedulers' evaluations. Not computed here: the paper buckets jobs
  by size (1, 2-4, 5-8, >8 GPUs, Fig. 2) but neither it nor its notebook (msr-fiddle/philly-traces
  ``analysis/Philly Trace Analysis.ipynb``, whose saved outputs are only plots) prints a bucket's share, and the job
  log itself (``trace-data.tar.gz``, 1.06 GB) is stored in Git LFS, out of this project's reach. Gavel's mix has no
  job above 8 GPUs, where Fig. 2 shows some.
- ``helios`` (Hu et al., "Characterization and Prediction of Deep Learning Workloads in Large-Scale GPU
  Datacenters", SC 2021): sizes read off the CDF of job sizes by number of jobs (the figure captioned "The CDFs of
  job sizes (in GPU number) with the number of jobs (a) and GPU time (b)", as the HeliosArtifact notebook
  ``job characterization`` draws it; clusters averaged by eye: 1 GPU 66%, 2: 8%, 4: 8%, 8: 11%, 16: 4%, 32: 1.5%,
  64: 1%, 128: 0.5%); durations read off its CDF of GPU job time (panel (a) of "Distributions of GPU (a) and CPU (b)
  jobs over execution time") with the median set to the 206 s of the artifact's cluster summary
  (``helios_cluster_summary.csv``, all four clusters: median GPU job 206 s, mean 6,652 s, mean 3.7 GPUs).
- ``pai`` (Weng et al., "MLaaS in the Wild", NSDI 2022): sizes read off the CDF of GPU request per task (Fig. 6's
  GPU panel in the authors' notebook, alibaba/clusterdata ``analysis.ipynb``): 45% ask for part of one GPU and 82%
  for at most one, 86% at most 2, 90% at most 4, 92% at most 6; fractions of a GPU are rounded up to one (plait does
  not share GPUs) and the 8% above 6 GPUs is spread over 8-64 by assumption. Durations read off the PAI curve of
  its Fig. 4 (task runtime CDF).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from plait.errors import ConfigError
from plait.schedule.speed import SpeedModel
from plait.schedule.trace import TraceJob

Family = Literal["philly", "helios", "pai"]


@dataclass(frozen=True, kw_only=True)
class TraceShape:
    """A family's size and duration distributions."""

    sizes: tuple[int, ...]
    """GPU counts jobs ask for."""
    size_shares: tuple[float, ...]
    """Share of jobs at each size (sums to 1)."""
    duration_cdf: tuple[tuple[float, float], ...]
    """(cumulative share, seconds) points of the duration distribution, increasing in both."""


SHAPES: dict[str, TraceShape] = {
    "philly": TraceShape(sizes=(1, 2, 4, 8), size_shares=(0.70, 0.10, 0.15, 0.05),
                         duration_cdf=((0.0, 10.0), (0.05, 48.0), (0.1, 61.0), (0.2, 76.0), (0.3, 229.0),
                                       (0.4, 630.0), (0.5, 1186.0), (0.6, 1871.0), (0.7, 2590.0), (0.8, 4699.0),
                                       (0.9, 12859.0), (0.95, 49948.0), (0.99, 287283.0), (1.0, 1.0e6))),
    "helios": TraceShape(sizes=(1, 2, 4, 8, 16, 32, 64, 128),
                         size_shares=(0.66, 0.08, 0.08, 0.11, 0.04, 0.015, 0.01, 0.005),
                         duration_cdf=((0.0, 2.0), (0.1, 20.0), (0.2, 60.0), (0.5, 206.0), (0.7, 600.0),
                                       (0.8, 2000.0), (0.9, 1.0e4), (0.99, 2.0e5), (1.0, 1.0e6))),
    "pai": TraceShape(sizes=(1, 2, 4, 8, 16, 32, 64), size_shares=(0.82, 0.04, 0.04, 0.03, 0.03, 0.02, 0.02),
                      duration_cdf=((0.0, 10.0), (0.05, 15.0), (0.2, 60.0), (0.4, 250.0), (0.5, 500.0),
                                    (0.6, 1100.0), (0.8, 5000.0), (0.9, 1.2e4), (0.99, 6.0e4), (1.0, 2.0e5))),
}
for _name, _shape in SHAPES.items():
    assert abs(sum(_shape.size_shares) - 1.0) < 1e-9 and len(_shape.sizes) == len(_shape.size_shares), _name

MODELS_BY_SIZE: tuple[tuple[int, tuple[str, ...]], ...] = (
    (2, ("gpt3-125m", "gpt3-350m", "gpt3-760m")),
    (8, ("gpt3-760m", "gpt3-1.3b", "gpt3-2.7b")),
    (32, ("gpt3-2.7b", "gpt3-6.7b", "llama3-8b")),
    (1 << 30, ("llama3-8b", "llama2-13b")),
)
"""(largest size, catalog models a job of up to that many GPUs trains): assumed, since the traces name no models;
larger jobs train larger models, as the traces' GPU-hours concentrate in the large jobs."""


def _models(gpus: int) -> tuple[str, ...]:
    return next(models for top, models in MODELS_BY_SIZE if gpus <= top)


def _durations_s(shape: TraceShape, u: np.ndarray) -> np.ndarray:
    cdf = np.array([p for p, _ in shape.duration_cdf])
    log_s = np.log(np.array([s for _, s in shape.duration_cdf]))
    return np.exp(np.interp(u, cdf, log_s))


def window_s(sizes: np.ndarray, durations_s: np.ndarray, at: np.ndarray, target_gpus: float) -> np.ndarray:
    """Arrival times ``at x T`` (``at`` rises from 0 to 1) with the window ``T`` at which the GPU-seconds the jobs
    would hold inside ``[0, T]`` if each started on arrival, ``sum(gpus x min(duration, T - arrival))``, equal
    ``target_gpus x T`` (the offered load over the arrival window, in GPUs). That in-window share falls as ``T``
    grows, so bisection finds ``T``. Counting only what falls inside the window keeps a heavy tail honest: a 10^6 s
    job arriving in a 10^5 s window offers 10^5 s of it, not all of it (the load of the sum of GPU-seconds over the
    window would be met by one long job while the cluster idles)."""
    if len(at) == 1:
        return np.zeros(1)

    def held(t_s: float) -> float:
        return float(np.sum(sizes * np.minimum(durations_s, t_s * (1.0 - at)))) / t_s

    low, high = 1e-3, float(np.sum(sizes * durations_s)) / target_gpus + 1.0
    for _ in range(100):  # the ratio halves each step; 100 steps reach a double's precision
        mid = 0.5 * (low + high)
        low, high = (mid, high) if held(mid) > target_gpus else (low, mid)
    return at * high


MAX_JOBS = 100_000
"""Most jobs one synthetic trace draws: a bound on the work one ``plait schedule`` may ask for, a Philly-scale trace
(the public Philly trace holds 117,325 jobs submitted 2017-08-07 to 2017-12-22, msr-fiddle/philly-traces README).
Each policy's time for it on 16,384 GPUs: ``python benchmarks/schedule_speed.py --jobs 100000 --gpus 16384``
(figures in docs/schedule.md: 10-170 CPU seconds by policy on two shared cores)."""
MAX_SEED = 2**32 - 1
"""Largest seed: the 32-bit seeds every common generator takes (numpy's takes any non-negative integer)."""


def synthetic_trace(family: str, num_jobs: int, seed: int, speed: SpeedModel, cluster_gpus: int,
                    load: float = 1.5) -> tuple[TraceJob, ...]:
    """``num_jobs`` jobs of ``family`` for a cluster of ``cluster_gpus`` GPUs, offered load ``load``."""
    if family not in SHAPES:
        raise ConfigError(f"--synthetic={family!r} must be one of {', '.join(get_args(Family))}")
    if not 1 <= num_jobs <= MAX_JOBS or not 0 < load <= 10:
        raise ConfigError(f"--jobs={num_jobs} must be in [1, {MAX_JOBS}] and --load={load} in (0, 10]")
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed={seed} must be in [0, {MAX_SEED}]")
    shape, rng = SHAPES[family], np.random.default_rng(seed)
    fits = [i for i, g in enumerate(shape.sizes) if g <= cluster_gpus]
    shares = np.array([shape.size_shares[i] for i in fits])
    sizes = np.array([shape.sizes[i] for i in fits])[rng.choice(len(fits), size=num_jobs, p=shares / shares.sum())]
    durations = _durations_s(shape, rng.random(num_jobs))
    picks = rng.random(num_jobs)
    gaps = np.cumsum(rng.exponential(1.0, size=num_jobs))
    arrivals = window_s(sizes, durations, (gaps - gaps[0]) / max(gaps[-1] - gaps[0], 1e-300), load * cluster_gpus)
    jobs = []
    for i in range(num_jobs):
        gpus, models = int(sizes[i]), _models(int(sizes[i]))
        model = models[int(picks[i] * len(models))]
        at = speed.at(model, gpus)
        assert at is not None, f"{model} has no plan on {gpus} GPUs"
        jobs.append(TraceJob(job_id=f"{family}-{i:05d}", arrival_s=round(float(arrivals[i]), 3), model=model,
                             gpus=gpus, tokens=float(f"{durations[i] * at.tokens_per_s:.6g}")))
    return tuple(jobs)
