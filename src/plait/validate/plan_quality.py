"""Planner quality on measured runs: its best plan must not predict slower than the published layout.

For every run with a complete published layout (tp, pp, dp and micro-batch stated), the
planner searches the same model, cluster, GPU count, global batch and precision, with
the run's engine and the published prediction's gradient dtype, over its
default space widened by the run's own micro-batch, virtual-stage and cp values (so the
published layout is a candidate). Its best plan's predicted step time is compared with
the prediction for the published layout; runs whose published layout does not fit
plait's memory model are skipped (the planner only returns plans that fit).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plait.cost.estimate import Estimate
from plait.engine.catalog import get_engine
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.validate.report import predict_row
from plait.validate.runs import RunRow
from plait.validate.translate import row_cluster, row_model


@dataclass(frozen=True)
class QualityCase:
    """One run: the published layout's prediction and the planner's best."""

    row: RunRow
    published: Estimate
    planned: Estimate

    @property
    def gain(self) -> float:
        """Predicted speed-up of the planner's plan over the published layout (1.10 = 10% faster)."""
        return self.published.step_time_s / self.planned.step_time_s


def complete(row: RunRow) -> bool:
    """Whether the run states tp, pp, dp and micro-batch, and has a measured step time."""
    return None not in (row.tp, row.pp, row.dp, row.micro_batch, row.step_time_s) and row.missing_shape() is None


def compare(row: RunRow) -> QualityCase | None:
    """Plan the run's job and compare with its published layout (``None`` if it cannot be predicted)."""
    published = predict_row(row)
    if published.estimate is None or not published.fits:
        return None
    engine = get_engine(row.run_engine)
    model, cluster = row_model(row, engine), row_cluster(row)
    space = default_space(model, cluster, row.n_gpus, (row.global_batch,), seq_len=row.seq_len,  # type: ignore[arg-type]
                          precisions=(row.precision or "bf16",), memory_margin=0.0,
                          grad_reduce_dtypes=(published.estimate.plan.grad_reduce_dtype,))
    space = replace(space, micro_batches=tuple(sorted({*space.micro_batches, row.micro_batch})),  # type: ignore[arg-type]
                    vpp=tuple(sorted({*space.vpp, *(v for v in (row.vpp,) if v and v > 1)})),
                    cp=tuple(sorted({*space.cp, row.cp or 1})),
                    sequence_parallel=(True, False) if engine.sequence_parallel is None else (engine.sequence_parallel,))
    result = run_search(model, cluster, space, engine=engine)
    planned = result.top(1)
    if not planned:
        return None
    return QualityCase(row, published.estimate, planned[0])
