"""Where one estimate's time goes: the median CPU microseconds of each of its phases, per plan.

Run: python benchmarks/estimate_phases.py [--repeats 300] [--cold]
For the plans of ``benchmarks/estimate_speed.py`` and of ``benchmarks/vs_calculon.py`` (plait's side only), times
each phase of ``plait.predict.estimate.estimate`` as it runs them, in order, by the thread's CPU time
(``time.thread_time``): building the job (the plan rules), the per-layer quantities and per-layer FSDP times
(``plait.cost.prepared.prepare``), the rest of the batch evaluation (stages, data-parallel sync, memory), the engine's
capability check, the per-rank costs of the pipeline simulation and its sweep (plans ``estimate`` simulates), the
Estimate's assembly and its interval. Prints the median of each over the repeats, their sum and the load average
(``os.getloadavg``). The phases add up to about one estimate (``benchmarks/estimate_speed.py``), less the calls
between them. ``--cold`` empties what estimates keep before each one (``empty_kept`` of
``benchmarks/estimate_speed.py``): a plan seen first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from plait.cost.batch import evaluate_batch
from plait.cost.prepared import prepare
from plait.cost.step import estimate_from_batch
from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.predict.estimate import wants_simulation
from plait.predict.intervals import step_interval_s
from plait.simulate.costs import pipeline_costs
from plait.simulate.pipeline import simulate_pipeline
from plait.workload.catalog import get_model

PHASES = ("job", "layers", "stages", "engine", "pipeline", "sweep", "estimate", "interval")


def _phases(model_name: str, cluster_name: str, plan: object, repeats: int, cold: bool) -> dict[str, float]:
    """Median CPU microseconds of each phase of one estimate of ``plan`` (``cold``: with nothing kept)."""
    from estimate_speed import empty_kept

    model, cluster, engine = get_model(model_name), get_cluster(cluster_name), get_engine()
    samples: dict[str, list[float]] = {name: [] for name in PHASES}
    clock = time.thread_time
    for _ in range(repeats):
        if cold:
            empty_kept()
            cluster.link_cache.pop("times", None)
        t0 = clock()
        job = Job.build(model, cluster, plan, engine)  # type: ignore[arg-type]
        t1 = clock()
        prepared = prepare(model, cluster, job.columns, job.framework)
        t2 = clock()
        result = evaluate_batch(model, cluster, job.columns, job.framework, prepared)
        t3 = clock()
        first_unsupported(job.plan, model, engine, cols=job.columns)
        t4 = clock()
        costs = pipeline_costs(job, result.prepared) if wants_simulation(job.plan) else None
        t5 = clock()
        if costs is not None:
            simulate_pipeline(costs, record=False)
        t6 = clock()
        est = estimate_from_batch(model, cluster, result, 0, engine.spec, step_interval_s)
        t7 = clock()
        _ = est.step_time_interval_s
        t8 = clock()
        for name, start, end in zip(PHASES, (t0, t1, t2, t3, t4, t5, t6, t7), (t1, t2, t3, t4, t5, t6, t7, t8),
                                    strict=True):
            samples[name].append((end - start) * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--cold", action="store_true", help="empty what estimates keep before every estimate")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from estimate_speed import CASES
    from machine_load import load_average
    from vs_calculon import CASES as CALCULON_CASES
    from vs_calculon import PLAIT_CLUSTER

    cases = [(f"{m} / {p.describe()}", m, c, p) for m, c, p in CASES]
    cases += [(f"Calculon's {k.name}", k.plait_model, PLAIT_CLUSTER, k.plan) for k in CALCULON_CASES]
    load_before = load_average()
    print(f"{'plan':40s} " + " ".join(f"{name:>8s}" for name in PHASES) + f" {'sum':>8s}   (CPU us, medians)")
    for label, model, cluster, plan in cases:
        medians = _phases(model, cluster, plan, args.repeats, args.cold)
        print(f"{label[:40]:40s} " + " ".join(f"{medians[name]:8.1f}" for name in PHASES)
              + f" {sum(medians.values()):8.1f}")
    print(f"{args.repeats} {'cold ' if args.cold else ''}estimates per plan; load average (1, 5, 15 min) "
          f"{load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
