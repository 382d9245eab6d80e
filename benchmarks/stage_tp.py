"""A TP degree per pipeline stage (plait.search.stage_tp) against the uniform plan and against the per-stage layer,
recomputation and sharding split (plait.search.stage_program), on three model/cluster cases.

Run: PYTHONPATH=src python benchmarks/stage_tp.py
Per case: a uniform 1F1B pipeline, its best layer split (no TP change), and the best of the TP-degree patterns
the planner tries (the imbalance gate and the pruning lifted, so every pattern is costed), each as the closed-form step time
(``plait estimate``'s, no simulation) and its gain over the uniform plan. A TP pattern that the search keeps must
beat both; the last column says whether it does.
"""

from __future__ import annotations

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.predict.estimate import predict
from plait.search import stage_tp
from plait.search.stage_program import best_split
from plait.workload.catalog import resolve_model

CASES = (  # model, cluster, uniform plan
    ("nemotron4-15b", "dgx-h100-ib", Plan(tp=2, sp=True, pp=8, dp_replicate=4, global_batch=64, seq_len=4096)),
    ("llama3-70b", "dgx-h100-ib", Plan(tp=4, sp=True, pp=16, dp_replicate=2, global_batch=64, seq_len=4096)),
    ("llama3.1-405b", "gb200-nvl72", Plan(tp=8, sp=True, pp=42, dp_replicate=4, global_batch=128, seq_len=8192)),
)
MARGIN = 0.1
"""Memory held back (assumed: as a tight ``--memory-margin``)."""


def main() -> None:
    engine = get_engine("megatron-core")
    stage_tp.IMBALANCE = -1.0  # every pattern costed, whatever the uniform plan's balance
    for name, cluster_name, plan in CASES:
        model, cluster = resolve_model(name), get_cluster(cluster_name)
        limit = cluster.accelerator.memory_bytes * (1.0 - MARGIN)

        def step_s(p: Plan) -> float:
            return predict(Job.build(model, cluster, p, engine), simulate=False).step_time_s

        uniform = step_s(plan)
        split = best_split(model, cluster, engine, plan, limit) or plan
        tried = [(step_s(p), p) for p in stage_tp.tp_splits(model, cluster, engine, plan, limit, prune=False)]
        best_tp, tp_plan = min(tried, key=lambda x: x[0]) if tried else (float("inf"), plan)
        layer_s = step_s(split)
        print(f"{name} on {cluster_name} ({plan.num_gpus} GPUs), {plan.describe()}")
        print(f"  uniform      {uniform:8.4f} s")
        print(f"  layer split  {layer_s:8.4f} s  gain {uniform / layer_s - 1:+.2%}  {split.describe()}")
        print(f"  stage tp     {best_tp:8.4f} s  gain {uniform / best_tp - 1:+.2%}  {tp_plan.describe()}")
        print(f"  stage tp beats the layer split: {best_tp < layer_s} ({layer_s / best_tp - 1:+.2%})")


if __name__ == "__main__":
    main()
