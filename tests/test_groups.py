"""The communication groups a plan forms: layer (a) a rank layout written out rank by rank, layer (c) property
tests over random mixture-of-experts plans that every group spans at most the plan's own GPUs."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import plait.cost.collectives as coll
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.groups import rank_groups
from plait.plan.plan import Plan
from plait.plan.rules import check_plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import empty_kept

H100 = get_cluster("dgx-h100-ib")
MOE_MODELS = ["mixtral-8x7b", "deepseek-v3"]
DEGREES = st.sampled_from([1, 2, 4, 8])


def _layouts(cols: PlanColumns) -> dict[str, np.ndarray]:
    """Every group of each kind as rows of ranks, from the layout written out: ranks tp fastest, then cp, then dp
    (shard, then replicate), then pp; experts over the dp x cp ranks of a stage, ep fastest (Megatron-Core's
    ``RankGenerator`` order ``tp-cp-ep-dp-pp`` with the expert generator's ``cp = 1``)."""
    tp, cp, ep, pp = (int(cols[k]) for k in ("tp", "cp", "ep", "pp"))
    shard, replicate = int(cols["dp_shard"]), int(cols["dp_replicate"])
    dp = shard * replicate
    ranks = np.arange(pp * dp * cp * tp).reshape(pp, replicate, shard, cp, tp)
    stage = ranks.reshape(pp, dp * cp, tp)  # the dp x cp ranks of a stage, cp fastest
    experts = stage.reshape(pp, dp * cp // ep, ep, tp)
    return {
        "tp": ranks.reshape(-1, tp),
        "cp": ranks.transpose(0, 1, 2, 4, 3).reshape(-1, cp),
        "dp": ranks.transpose(0, 3, 4, 1, 2).reshape(-1, dp),
        "dp_cp": stage.transpose(0, 2, 1).reshape(-1, dp * cp),
        "ep": experts.transpose(0, 1, 3, 2).reshape(-1, ep),
        "expert_dp": experts.transpose(0, 2, 3, 1).reshape(-1, dp * cp // ep),
        "pp": ranks.reshape(pp, -1).T,
    }


@settings(max_examples=150, deadline=None)
@given(tp=DEGREES, cp=DEGREES, ep=DEGREES, shard=DEGREES, replicate=DEGREES, pp=DEGREES)
def test_groups_are_the_rank_layout_written_out(tp: int, cp: int, ep: int, shard: int, replicate: int,
                                                pp: int) -> None:
    """Each group kind's (size, stride) gives exactly the groups of the layout written out rank by rank; the kinds
    tile the plan's GPUs and their sizes multiply to it."""
    assume((shard * replicate * cp) % ep == 0)
    plan = Plan(tp=tp, cp=cp, ep=ep, dp_shard=shard, dp_replicate=replicate, pp=pp)
    cols = PlanColumns.one(plan)
    groups, written = rank_groups(cols), _layouts(cols)
    assert set(groups) == set(written)
    for name, group in groups.items():
        rows = written[name]
        assert rows.size == plan.num_gpus and np.array_equal(np.sort(rows, axis=None), np.arange(plan.num_gpus))
        assert rows.shape[1] == group.size, name
        assert np.array_equal(rows - rows[:, :1], np.broadcast_to(group.stride * np.arange(group.size), rows.shape))
        assert group.span <= plan.num_gpus, name
    size = {name: group.size for name, group in groups.items()}
    assert size["tp"] * size["cp"] * size["dp"] * size["pp"] == plan.num_gpus
    assert size["dp_cp"] == size["dp"] * size["cp"] == size["ep"] * size["expert_dp"]


def _moe_plan(data: st.DataObject) -> Plan:
    """A random plan of every parallelism with experts, on a layout the plan rules accept."""
    ep = data.draw(DEGREES, label="ep")
    shard = data.draw(DEGREES, label="dp_shard")
    sharding = data.draw(st.sampled_from(["none", "zero1", "zero3"]), label="sharding") if shard > 1 else "none"
    replicate = data.draw(DEGREES, label="dp_replicate")
    if sharding == "none":
        shard, replicate = 1, shard * replicate
    pp = data.draw(st.sampled_from([1, 2, 4]), label="pp")
    dp = shard * replicate
    return Plan(tp=data.draw(DEGREES, label="tp"), cp=data.draw(DEGREES, label="cp"), ep=ep, dp_shard=shard,
                dp_replicate=replicate, sharding=sharding, pp=pp,  # type: ignore[arg-type]
                micro_batch=1, global_batch=dp * data.draw(st.sampled_from([1, 2, 8]), label="micro_batches"))


@settings(max_examples=120, deadline=None)
@given(model=st.sampled_from(MOE_MODELS), data=st.data())
def test_every_group_the_cost_model_forms_spans_at_most_the_plan(model: str, data: st.DataObject) -> None:
    """Every group the estimate of a mixture-of-experts plan puts on the network (tensor, context, expert and
    data parallel, expert-data-parallel, pipeline) spans at most the plan's GPUs: a span past them would
    price the collective on a farther network tier, or, past the cluster, refuse the plan."""
    spec, plan = get_model(model), _moe_plan(data)
    try:
        check_plan(plan, spec, H100)
    except ConfigError:
        assume(False)
    formed: list[tuple[int, int]] = []
    real = coll._group_link

    def spy(cluster, size, stride):  # type: ignore[no-untyped-def]
        formed.append((size, stride))
        return real(cluster, size, stride)

    empty_kept(H100)  # every group is looked up afresh (nothing kept from an earlier estimate), so the spy sees it
    with mock.patch.object(coll, "_group_link", spy):
        estimate(spec, H100, plan, engine=get_engine())
    empty_kept(H100)
    assert formed or plan.num_gpus == 1
    for size, stride in formed:
        assert stride * (size - 1) + 1 <= plan.num_gpus, (plan.describe(), size, stride)
