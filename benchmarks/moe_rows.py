"""Per-layer view of the mixture-of-experts rows of the dev set: measured and predicted time of one layer pass.

For every MoE row of ``plait/validate/data/dev.csv`` (or ``--runs FILE``) this prints, per layer and micro-batch on
one GPU (a "layer pass": one layer's forward and backward for one micro-batch; a step holds ``micro-batches x
layers per stage`` of them):

- ``meas`` and ``pred``: the measured and predicted step time divided by the layer passes (pipeline bubbles and
  everything outside the layers are spread over them);
- ``device``: the same prediction with the host stream removed (``host_launch_us`` and ``host_sync_us`` of the
  row's accelerator set to 0: no launch cost, no sync round trip), i.e. what plait thinks the GPU itself takes;
- ``host``: plait's host time to issue one MoE layer pass, forward + backward (:func:`plait.cost.host.layer_host_s`),
  and the host time per operation it charges (``host_launch_us``: 10 us on x86 hosts, 27.5 us on Grace).

``pred - device`` is what the host stream adds to a layer pass; ``meas - device`` is what the measurement leaves
for it (and for anything else plait misses); ``dev+host`` is the two streams run one after the other, the most a
host can add if nothing overlaps. Nothing here is fitted: it reads the rows and the current model.

Run: ``python benchmarks/moe_rows.py`` (about a second; ``--runs`` for another runs file).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from plait.cost.host import layer_host_s
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.figure import Figure
from plait.validate.report import predict_row
from plait.validate.runs import read_runs
from plait.validate.translate import row_cluster, row_model

DEV = Path(__file__).parents[1] / "src" / "plait" / "validate" / "data" / "dev.csv"
NO_HOST = Figure(value=0.0, source="assumed: the host stream removed, for this comparison only")


def _without_host(cluster):
    """The cluster with a free host: no launch cost, no synchronization round trip."""
    eff = dataclasses.replace(cluster.accelerator.efficiency, host_launch_us=NO_HOST, host_sync_us=NO_HOST)
    return dataclasses.replace(cluster, accelerator=dataclasses.replace(cluster.accelerator, efficiency=eff))


@dataclasses.dataclass(frozen=True)
class LayerPass:
    """One MoE row seen per layer pass (milliseconds)."""

    row_id: str
    micro_batch: int
    passes: int
    """Layer passes one GPU runs per step: its replica's micro-batches times the layers of its stage."""
    measured_ms: float
    predicted_ms: float
    device_ms: float
    """The prediction with the host stream removed."""
    host_ms: float
    """plait's host time to issue one MoE layer's forward and backward for one micro-batch."""
    launch_us: float
    """Host time per operation the row's accelerator is charged (``host_launch_us``)."""
    error_pct: float


def layer_passes(rows: list) -> list[LayerPass]:
    """The MoE rows of ``rows`` with a measured step time, per layer pass (rows plait cannot predict are left out)."""
    rows = [r for r in rows if r.moe_experts and r.step_time_s]
    with_host = {r.id: predict_row(r) for r in rows}
    device_only = {r.id: predict_row(r, lambda row: _without_host(row_cluster(row))) for r in rows}
    out = []
    for row in rows:
        res, dev = with_host[row.id], device_only[row.id]
        if res.estimate is None or dev.estimate is None:
            continue
        est, plan = res.estimate, res.estimate.plan
        passes = plan.global_batch // (plan.micro_batch * plan.dp) * -(-(row.layers or 0) // plan.pp)
        engine = get_engine(row.run_engine)
        setup = Setup(model=row_model(row, engine), cluster=row_cluster(row), plan=plan, framework=engine.framework)
        host_fwd, host_bwd = layer_host_s(setup, moe_layer=True)
        ms = 1e3 / passes
        out.append(LayerPass(row.id, plan.micro_batch, passes, row.step_time_s * ms, est.step_time_s * ms,
                             dev.estimate.step_time_s * ms, (host_fwd + host_bwd) * 1e3,
                             setup.cluster.accelerator.efficiency.host_launch_us.value, res.error_pct))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=DEV, help="runs CSV (default: the dev set)")
    args = parser.parse_args()
    print(f"{'row':44s} {'mb':>3s} {'passes':>6s} {'meas':>7s} {'pred':>7s} {'device':>7s} {'host':>6s} "
          f"{'dev+host':>8s} {'us/op':>5s} {'err':>7s}   (ms per layer pass)")
    for p in layer_passes(read_runs(args.runs)):
        print(f"{p.row_id:44s} {p.micro_batch:3d} {p.passes:6d} {p.measured_ms:7.2f} {p.predicted_ms:7.2f} "
              f"{p.device_ms:7.2f} {p.host_ms:6.2f} {p.device_ms + p.host_ms:8.2f} {p.launch_us:5.1f} "
              f"{p.error_pct:+6.1f}%")


if __name__ == "__main__":
    main()
