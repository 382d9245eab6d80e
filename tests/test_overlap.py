"""Overlap of collectives with compute: contention and the FSDP backward-prefetch modes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from plait.cost.prepared import prepare
from plait.cost.overlap import hidden_remainder
from plait.engine.catalog import get_engine
from plait.engine.facts import EngineFacts
from plait.hardware.catalog import get_cluster
from plait.plan.array_ops import ARRAY
from plait.plan.columns import PlanColumns
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.validate.datasets import dataset_path
from plait.workload.catalog import get_model

CLUSTER = get_cluster("dgx-h100-ib")
MODEL = get_model("llama3-8b")
FSDP = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=8)


@pytest.mark.parametrize(("comm", "compute", "overlap", "exposed"), [
    (1.0, 3.0, 1.0, 0.0),        # fully hidden, no contention
    (1.0, 3.0, 0.8, 0.2),        # hidden, but the 1 s beside compute costs 20% of it
    (3.0, 1.0, 0.8, 2.0 + 0.2),  # 2 s stick out, the overlapped 1 s costs 0.2 s
    (2.0, 2.0, 0.0, 2.0),        # no overlap at all: serialised
])
def test_hidden_remainder_exact(comm: float, compute: float, overlap: float, exposed: float) -> None:
    for xp in (SCALAR, ARRAY):  # one plan's floats and a batch's columns
        assert float(hidden_remainder(comm, compute, overlap, xp)) == pytest.approx(exposed)


def test_contention_never_speeds_up_a_step() -> None:
    """Less hideable overlap (more contention) can only lengthen a step that overlaps anything."""
    acc = CLUSTER.accelerator
    free = replace(CLUSTER, accelerator=replace(acc, efficiency=replace(
        acc.efficiency, comm_overlap=replace(acc.efficiency.comm_overlap, value=1.0))))
    contended, uncontended = (estimate(MODEL, c, FSDP, engine=get_engine()).step_time_s for c in (CLUSTER, free))
    assert contended > uncontended


def test_backward_post_puts_every_backward_gather_in_line() -> None:
    """FSDP1 BACKWARD_POST: the step grows by at least the hidden part of the layers' backward gathers."""
    pre = estimate(MODEL, CLUSTER, FSDP, engine=get_engine())
    late = replace(get_engine(), framework=EngineFacts(shard_backward_prefetch="post"))
    post = estimate(MODEL, CLUSTER, FSDP, engine=late)
    prepared = prepare(MODEL, CLUSTER, PlanColumns.one(FSDP.with_seq_len(MODEL.seq_len)), EngineFacts())
    gather = prepared.fsdp[0].gather_s
    assert gather > 0
    in_line = MODEL.num_layers * gather  # with BACKWARD_PRE these were hidden behind compute
    assert post.time.fsdp_comm_s >= in_line
    # the device's step grows by the gathers put in line; the host's launches, joined to the device pass by pass,
    # show less of themselves behind a longer device pass (plait/cost/host.py)
    device = lambda e: e.step_time_s - e.time.host_s  # noqa: E731
    assert device(post) - device(pre) == pytest.approx(post.time.fsdp_comm_s - pre.time.fsdp_comm_s, rel=1e-9)
    assert post.time.host_s <= pre.time.host_s
    assert not np.isclose(post.step_time_s, pre.step_time_s)


@pytest.mark.parametrize(("spec", "grad"), [
    ("llm-foundry[mixed_precision=DEFAULT]", "fp32"), ("llm-foundry[mixed_precision=PURE]", "bf16"), ("llm-foundry", "fp32"),
    ("llm-foundry@2023-05[mixed_precision=PURE]", "bf16"), ("llm-foundry@2023-05", "fp32"),
])
def test_composer_mixed_precision_is_an_engine_option(spec: str, grad: str) -> None:
    """Composer's FSDP1 mixed-precision modes (docs/research/framework_facts.md, section 1) as engine options."""
    engine = get_engine(spec)
    assert engine.grad_reduce_dtype == grad and engine.framework.shard_backward_prefetch == "post"
    assert engine.framework.attention_kernel == "flash1"


def test_dev_rows_run_the_engine_their_notes_document() -> None:
    """Rows carry their engine in data (no switch on the source name): each llm-foundry row runs the FSDP
    mixed-precision mode its notes record, a row whose sharding the notes say ran on DeepSpeed runs DeepSpeed, and a
    torchtitan row compiles where its notes say so (torchtitan's own default otherwise: no compile)."""
    import re

    from plait.validate.runs import read_runs

    rows = read_runs(dataset_path("dev"))
    foundry = [r for r in rows if r.source == "llmfoundry"]
    assert foundry and all(
        r.run_engine.endswith(f"[mixed_precision={re.search(r'FSDP mp mode ([A-Z]+)', r.notes)[1]}]")
        for r in foundry)
    # The May-2023 sweep (every A100-40GB row, the A100-80GB 70B rows) ran torch 1.13.1, the rest torch 2.1.
    old = [r.gpu == "a100-40gb" or (r.gpu == "a100-80gb" and r.model == "MPT-70B") for r in foundry]
    assert all(r.run_engine.startswith("llm-foundry@2023-05[" if o else "llm-foundry[") for r, o in zip(foundry, old))
    deepspeed = [r for r in rows if "ZeRO-3 (DeepSpeed)" in r.notes]
    assert deepspeed and all(r.engine == "megatron-lm@2021" and r.run_engine == "deepspeed@2021" for r in deepspeed)
    titan = [r for r in rows if r.engine == "torchtitan"]
    assert all(r.run_engine == f"torchtitan[compile={str('compile' in r.notes.lower()).lower()}]" for r in titan)
    assert {get_engine(r.run_engine).name for r in rows} >= {"megatron-lm", "deepspeed", "torchtitan", "llm-foundry",
                                                             "nemo", "megatron-bridge"}


def test_torchtitan_selective_layer_is_every_second_layer_and_op_is_per_op() -> None:
    """torchtitan's 'selective layer' checkpointing is full recompute of half the layers; 'selective op' is its
    per-op policy, costed as plait's selective recomputation under that engine (engines.toml)."""

    from plait.validate.runs import read_runs
    from plait.validate.translate import candidate_plans

    rows = {r.id: r for r in read_runs(dataset_path("dev"))}
    layer = rows["torchtitan_docs_a100_Llama38B_selectivelayer_lb1"]
    plans = list(candidate_plans(layer, get_engine(layer.engine)))
    assert plans and all(p.recompute == "full" and p.recompute_layers == layer.layers // 2 for p in plans)
    op = rows["torchtitan_docs_a100_Llama38B_selectiveop_lb1"]
    plans = list(candidate_plans(op, get_engine(op.engine)))
    assert plans and all(p.recompute == "selective" and p.grad_reduce_dtype == "fp32" for p in plans)
    assert get_engine(op.engine).framework.selective_policy == "every_other_mm"
    full = rows["torchtitan_docs_a100_Llama370B_full_lb1"]
    assert all(p.recompute == "full" and p.recompute_layers == -1 for p in candidate_plans(full, get_engine(full.engine)))


def test_fp32_residual_stream_moves_more_bytes() -> None:
    """Under autocast (fp32 parameters) the residual stream is fp32: norms, adds and SP all-gathers move twice
    the bytes of a bf16 stream, GEMMs are unchanged."""
    from plait.cost.layer import layer_cost
    from plait.cost.setup import Setup

    plan = Plan(tp=8, sp=True, micro_batch=1, global_batch=1).with_seq_len(MODEL.seq_len)
    bf16, fp32 = (layer_cost(Setup(model=MODEL, cluster=CLUSTER, plan=plan, framework=EngineFacts(residual_bytes=r)),
                             False) for r in (2, 4))
    assert fp32.fwd_compute_s > bf16.fwd_compute_s and fp32.tp_fwd_s > bf16.tp_fwd_s


def test_runtime_engine_follows_the_runtime_precision() -> None:
    """plait's runtime keeps fp32 parameters under autocast (a 4-byte residual stream) except where FSDP2 casts them."""
    from plait.cost.setup import Setup

    framework = get_engine("plait").framework

    def width(plan: Plan) -> int:
        return Setup(model=MODEL, cluster=CLUSTER, plan=plan.with_seq_len(64), framework=framework).residual_bytes

    assert width(Plan(dp_replicate=2, global_batch=2)) == 4  # DDP under autocast
    assert width(Plan(tp=2, sp=True)) == 4
    assert width(Plan(dp_shard=2, sharding="zero3", global_batch=2)) == 2  # FSDP2 bf16 params
