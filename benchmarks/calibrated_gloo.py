"""Predicted steps on a calibrated CPU description, read as NCCL's (before) and as written (after); no runs.

Run: python benchmarks/calibrated_gloo.py [--cluster examples/cpu-node.toml] [--before FILE] [--gnn]

A description ``plait calibrate`` writes on a CPU names gloo (``collective_backend``), so its collectives cost the
measured alpha-beta with no NCCL LL protocol, and its curves are net of the latency steps
(:func:`plait.run.calibrate.bus_bandwidths`). "Before" is ``--before`` (a description written before that, e.g.
``git show 9b47f6b:examples/cpu-node.toml``), or ``--cluster`` itself, read as NCCL's. Printed per plan: the step
predicted before and after and the change, for the plans of the benchmarks and docs rows that predict on a
calibrated CPU: ``run_vs_predict``, ``host_dispatch_cpu``, CP on CPU ranks, ``uneven_vs_predict``, the
synchronization methods on 2 and 4 loopback ranks (``sync_methods``; 4 ranks: the description's node widened to 4),
the asynchronous plans of ``tests/test_async_run.py``, and with ``--gnn`` ``gnn_epoch``'s default GraphSAGE step
(its graph takes a minute to generate).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_vs_predict  # noqa: E402
import sync_methods  # noqa: E402
import uneven_vs_predict  # noqa: E402

from plait.engine.catalog import get_engine  # noqa: E402
from plait.errors import ConfigError  # noqa: E402
from plait.hardware.catalog import cluster_from_mapping  # noqa: E402
from plait.hardware.cluster import Cluster  # noqa: E402
from plait.plan.io import read_plan_file  # noqa: E402
from plait.plan.plan import Plan  # noqa: E402
from plait.predict.estimate import estimate  # noqa: E402
from plait.run.uneven_prediction import predict_uneven  # noqa: E402
from plait.workload.catalog import resolve_model  # noqa: E402

SMALL, TINY = ROOT / "examples" / "small-model.toml", ROOT / "examples" / "tiny-model.toml"


def clusters(before: dict[str, Any], after: dict[str, Any], ranks: int = 0) -> tuple[Cluster, Cluster]:
    """(before read as NCCL's, after as written), the node widened to ``ranks`` where given."""
    wide = {"gpus_per_node": ranks, "scale_up_domain_gpus": ranks} if ranks else {}
    return (cluster_from_mapping({**before, **wide, "collective_backend": "nccl"}, "before"),
            cluster_from_mapping({**after, **wide}, "after"))


def plan_of(body: str, model: Path, folder: Path) -> Plan:
    path = folder / "plan.toml"
    path.write_text(f'[job]\nmodel = "{model}"\n[plan]\n{body}\n')
    return read_plan_file(path)[1]


def rows(before: dict[str, Any], after: dict[str, Any], folder: Path) -> list[tuple[str, float, float]]:
    pair, four = clusters(before, after), clusters(before, after, 4)
    small, tiny = resolve_model(str(SMALL)), resolve_model(str(TINY))
    engine = get_engine("plait")
    step = lambda model, plan, both: [estimate(model, c, plan, engine=engine).step_time_s for c in both]  # noqa: E731
    out = []
    for name, body in run_vs_predict.PLANS.items():
        out.append((f"run_vs_predict {name}", *step(small, plan_of(body, SMALL, folder), pair)))
    out.append(("host_dispatch_cpu dp2 mb1", *step(tiny, plan_of("dp_replicate = 2\nmicro_batch = 1\nglobal_batch = 2",
                                                                  TINY, folder), pair)))
    for flavour in ("ring", "ulysses"):
        out.append((f"cp=2 {flavour}", *step(small, plan_of(f'cp = 2\ncp_attention = "{flavour}"\nglobal_batch = 16\n'
                                                            'micro_batch = 4', SMALL, folder), pair)))
    for case in uneven_vs_predict.CASES:
        plan = plan_of(case.body, SMALL, folder)
        ests = [predict_uneven(small, c, plan, case.uneven) for c in pair]
        out.append((f"uneven {case.name}", *[e.step_time_s / e.plan.shares[0].local_steps for e in ests]))  # type: ignore[union-attr]
    for ranks, both in ((2, pair), (4, four)):
        for spec in [*sync_methods.SYNCHRONOUS, *sync_methods.ASYNCHRONOUS]:
            plan = Plan(dp_replicate=ranks, global_batch=16, micro_batch=4, dp_sync=spec)
            try:
                out.append((f"{ranks} ranks {spec}", *step(small, plan, both)))
            except ConfigError:  # a method of 4 ranks' harness that 2 cannot host (4 servers)
                continue
    for spec in ("async_ps:staleness=4", "easgd:alpha=0.45,every=2", "topk:ratio=0.01", "quantize:bits=8"):
        out.append((f"tiny {spec}", *step(tiny, Plan(dp_replicate=2, global_batch=8, micro_batch=4, dp_sync=spec), pair)))
    return out


def gnn_rows(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, float, float]]:
    """gnn_epoch.py's default step (GraphSAGE [10, 5], 512 seeds a rank, 100k-node graph), before and after."""
    import torch

    from plait.run.graph import generate
    from plait.workloads.gnn.cost import estimate_gnn
    from plait.workloads.gnn.model import GnnModel, GnnSpec, GraphStats
    from plait.workloads.gnn.run import gnn_worker_config
    from plait.workloads.gnn.sampler import Sampler
    from plait.workloads.gnn.sampling import measured_classes

    model = GnnModel(kind="sage", layers=2, hidden=128, fanouts=(10, 5), heads=1)
    asked = GnnSpec(name="benchmark", model=model, graph=GraphStats(
        nodes=100_000, edges=1_000_000, features=64, classes=8, train_nodes=100_000, degree_exponent=2.5,
        max_degree=99_999))
    graph = generate(100_000, 1_000_000, 2, 64, 8, exponent=2.5, mix=gnn_worker_config(asked, 512, 105, 0.0).mix)
    degrees = graph.degrees()
    spec = GnnSpec(name="benchmark", model=model, graph=GraphStats(
        nodes=graph.nodes, edges=graph.edges, features=64, classes=8, train_nodes=graph.nodes, degree_exponent=2.5,
        max_degree=int(degrees.max())))
    steps = [estimate_gnn(spec, c, 2, 512, "sampled_dp", edge_cut=graph.edge_cut(), cache_fraction=0.0,
                          classes=measured_classes(torch.bincount(degrees).numpy()), sampler=Sampler(kind="loop")).step_s
             for c in clusters(before, after)]
    return [("gnn_epoch sage [10,5] 512", *steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", type=Path, default=ROOT / "examples" / "cpu-node.toml")
    parser.add_argument("--before", type=Path, default=None, help="the description before (default: --cluster)")
    parser.add_argument("--gnn", action="store_true", help="also gnn_epoch.py's step (a minute)")
    args = parser.parse_args()
    wall, cpu = time.perf_counter(), time.process_time()
    after = tomllib.loads(args.cluster.read_text())
    before = tomllib.loads((args.before or args.cluster).read_text())
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"calibrated_gloo_{os.getpid()}"
    folder.mkdir(exist_ok=True)
    found = rows(before, after, folder) + (gnn_rows(before, after) if args.gnn else [])
    print(f"{'plan':48s} {'before s':>10s} {'after s':>10s} {'change':>8s}")
    for name, old, new in found:
        print(f"{name:48s} {old:10.5f} {new:10.5f} {new / old - 1:+8.1%}")
    print(f"after: {after.get('collective_backend', 'nccl')}; load {os.getloadavg()[0]:.1f}, wall "
          f"{time.perf_counter() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s")


if __name__ == "__main__":
    main()
