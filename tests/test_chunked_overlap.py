"""Chunked computation-collectives (fused computation-collectives, Punniyamurthy et al., SC 2024): the pipeline
form on hand-computed cases, the ``overlap_chunks`` knob where it enters, the planner's verdict, the DLRM's fused
lookups, and the chunked primitives on two gloo ranks (parity with one process, bytes = the cost model's)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.chunked import chunked_step_bytes, ep_send_bytes, pipelined_s, tp_block_bytes, tp_chunked_s
from plait.cost.flops import mlp_block_gemms
from plait.cost.layer import attention_part
from plait.cost.setup import Setup
from plait.engine.capability import first_unsupported
from plait.engine.catalog import engine_names, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.io import read_plan_parts
from plait.plan.plan import Plan
from plait.plan.rules import warnings
from plait.predict.estimate import estimate
from plait.search.chunks import chunk_verdict, with_best_chunks
from plait.workload.catalog import get_model, resolve_model
from plait.workloads import load
from plait.workloads.dlrm.cost import Placement, rank_loads
from plait.workloads.dlrm.fused import best_chunks, fused_estimate
from plait.workloads.dlrm.predict import parse_placements, predict_dlrm

ROOT = Path(__file__).parents[1]
TINY_MOE = ROOT / "examples" / "tiny-moe.toml"
TINY, PLAN = ROOT / "examples" / "tiny-model.toml", ROOT / "examples" / "tiny-tp2-chunks.toml"
MOE_PLAN = ROOT / "examples" / "tiny-moe-ep2-chunks.toml"
H100 = "dgx-h100-ib"
TP8 = Plan(tp=8, sp=True, pp=4, dp_shard=2, sharding="zero1", micro_batch=1, global_batch=64)


@pytest.mark.parametrize(("stages", "chunks", "overlap", "want"), [
    ((1.0, 3.0), 1, 1.0, 4.0),  # one chunk: the stages in sequence
    ((1.0, 3.0), 4, 1.0, 13.0),  # 1 + 3 fill and drain, 3 more beats of the slower stage
    ((1.0, 3.0), 4, 0.5, 14.5),  # each of the 3 beats also loses half of the 1 s overlapped beside it
    ((2.0, 2.0), 2, 1.0, 6.0),
])
def test_pipeline_form_on_hand_computed_cases(stages: tuple[float, float], chunks: int, overlap: float,
                                              want: float) -> None:
    assert pipelined_s(stages, chunks, overlap) == pytest.approx(want)


def test_one_chunk_costs_the_collectives_alone_as_the_unchunked_model_does() -> None:
    """With c = 1 the chunked form (each GEMM group's collectives) sums to the layer model's TP collectives."""
    model = get_model("llama3-70b")
    setup = Setup(model=model, cluster=get_cluster(H100), plan=replace(TP8, seq_len=model.seq_len),
                  framework=get_engine().framework)
    fwd, bwd = tp_chunked_s(setup, attention_part(setup).gemms, mlp_block_gemms(setup, False))
    assert fwd == pytest.approx(attention_part(setup).tp_comm_s, rel=1e-12)
    assert bwd == pytest.approx(fwd, rel=1e-12)


def test_chunking_wins_where_comm_and_compute_are_comparable_and_hides_no_more_than_the_comm() -> None:
    model, cluster, engine = get_model("llama3-70b"), get_cluster(H100), get_engine()
    base = estimate(model, cluster, TP8, engine=engine)
    steps = {c: estimate(model, cluster, replace(TP8, overlap_chunks=c), engine=engine).step_time_s for c in (2, 4, 64)}
    assert steps[2] < base.step_time_s and steps[4] < base.step_time_s
    assert min(steps.values()) > base.step_time_s - base.time.tp_comm_s  # cannot hide more than there is
    assert steps[64] > base.step_time_s  # 64 tiny GEMMs, each chunk paying a collective's latency


def test_the_knob_is_validated_where_it_enters_and_warned_where_it_does_nothing() -> None:
    with pytest.raises(ConfigError, match="overlap_chunks=0 must be in 1..64"):
        Plan(overlap_chunks=0)
    with pytest.raises(ConfigError, match="choose one"):
        Plan(tp=2, sp=True, overlap_chunks=2, tp_comm_overlap=True)
    model, cluster = get_model("llama3-8b"), get_cluster(H100)
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64, overlap_chunks=4)
    assert any("overlap_chunks=4 has no effect" in w for w in warnings(plan, model, cluster))
    plain = replace(plan, overlap_chunks=1)
    assert estimate(model, cluster, plan, engine=get_engine()).step_time_s == estimate(
        model, cluster, plain, engine=get_engine()).step_time_s


def test_every_engine_but_plait_names_its_reason_and_the_planner_says_what_chunking_would_give() -> None:
    model, cluster = get_model("llama3-70b"), get_cluster(H100)
    for name in engine_names():
        refusal = first_unsupported(replace(TP8, overlap_chunks=2), model, get_engine(name))
        if name == "plait":  # it runs them (plait.run.chunked_tp); zero1 with tp is its only objection here
            assert refusal is not None and "overlap_chunks" not in refusal and "zero1" in refusal
            continue
        assert refusal is not None and "overlap_chunks=2" in refusal, name
    plait, fp8 = get_engine("plait"), replace(TP8, sharding="zero3", precision="fp8", overlap_chunks=2)
    assert "overlap_chunks=2 with tp=8 and precision='fp8'" in (first_unsupported(fp8, model, plait) or "")
    engine = get_engine()
    verdict = chunk_verdict(model, cluster, engine, estimate(model, cluster, TP8, engine=engine))
    assert verdict is not None and verdict.chunks > 1 and verdict.gain > 0
    assert "not applied" in verdict.text() and engine.spec in verdict.text()
    dp_only = Plan(dp_shard=64, sharding="zero3", global_batch=64)
    assert chunk_verdict(model, cluster, engine, estimate(model, cluster, dp_only, engine=engine)) is None


def test_dlrm_fused_lookups_pay_where_lookups_and_all_to_alls_are_comparable() -> None:
    spec, cluster = load(str(ROOT / "examples" / "dlrm-small.toml")).description, get_cluster(H100)
    by_node = ",".join(f"{t.name}=column_wise@" + "+".join(str(8 * i + j) for j in range(8))
                       for i, t in enumerate(spec.tables))  # one node per table: all-to-alls over the network
    across = predict_dlrm(spec, cluster, 64, 1_048_576, placements=parse_placements(by_node, spec, 64))
    verdict = best_chunks(across)
    assert verdict.chunks > 1 and verdict.step_s < across.estimate.step_s
    floor = max(across.estimate.rank_time_s) - min(verdict.lookup_s, verdict.all_to_all_s)  # hides at most the smaller
    assert fused_estimate(across, verdict.chunks).step_s - across.estimate.dense_s >= floor * 0.999
    rows = ",".join(f"{t.name}=row_wise" for t in spec.tables)
    inside = predict_dlrm(spec, cluster, 8, 65_536, placements=parse_placements(rows, spec, 8))
    assert best_chunks(inside).chunks == 1  # NVLink all-to-alls of a few MB: each slice pays the latency again


@pytest.mark.slow
def test_chunked_primitives_on_two_gloo_ranks_equal_one_process_with_the_predicted_bytes() -> None:
    """Every primitive, whole and in 4 chunks, against the result one process computes: within 1e-5; chunking
    multiplies the messages by 4 and keeps the bytes, which equal the cost model's for the same shapes."""
    from tests.ranks import run_ranks

    tokens, hidden, top_k, batch, chunks = 64, 64, 2, 8, 4
    spec = load(str(ROOT / "examples" / "dlrm-tiny.toml")).description
    shapes = ",".join(f"{t.rows}x{t.dim}x{int(t.pooling)}" for t in spec.tables)
    out = run_ranks(2, ["-m", "plait.run.chunked_check", "--chunks", str(chunks), "--tokens", str(tokens),
                        "--hidden", str(hidden), "--top-k", str(top_k), "--batch", str(batch),
                        "--tables", shapes, "--plan", str(PLAN), "--plan", str(MOE_PLAN), "--steps", "2"],
                    timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ranks = {r["rank"]: r for r in (json.loads(line[8:]) for line in out.stdout.splitlines()
                                    if line.startswith("CHUNKED "))}
    assert sorted(ranks) == [0, 1]
    tiny, moe = resolve_model(str(ROOT / "examples" / "tiny-model.toml")), resolve_model(str(ROOT / "examples" / "tiny-moe.toml"))
    fp32 = dict(cluster=get_cluster(H100), framework=get_engine().framework)
    gathered, reduced = tp_block_bytes(Setup(model=tiny, plan=Plan(tp=2, sp=True, seq_len=tokens, precision="fp32"), **fp32))
    send = ep_send_bytes(Setup(model=moe, plan=Plan(ep=2, dp_replicate=2, seq_len=tokens, precision="fp32"), **fp32))
    placed = [Placement(t.name, "table_wise", (i % 2,)) for i, t in enumerate(spec.tables)]
    pooled = [load_.pooled_out for load_ in rank_loads(spec, placed, 2, 1, batch, 2)]
    predicted = {"all_gather_matmul": ("buffer_bytes", lambda r: gathered),
                 "matmul_reduce_scatter": ("buffer_bytes", lambda r: reduced),
                 "matmul_all_reduce": ("buffer_bytes", lambda r: reduced),
                 "expert_all_to_all": ("buffer_bytes", lambda r: 2 * send),  # dispatch and combine
                 "lookup_all_to_all": ("to_others_bytes", lambda r: pooled[r])}
    for rank, result in ranks.items():
        for name, (field, want) in predicted.items():
            whole, chunked = result[name]["whole"], result[name]["chunked"]
            assert whole["max_diff"] < 1e-5 and chunked["max_diff"] < 1e-5, (name, rank)
            assert chunked["messages"] == chunks * whole["messages"], (name, rank)
            assert chunked[field] == whole[field] == want(rank), (name, rank, field)
    _check_plait_run_chunks_tp_blocks(ranks)
    _check_plait_run_chunks_expert_all_to_alls(ranks)


def _check_plait_run_chunks_tp_blocks(ranks: dict[int, dict]) -> None:  # type: ignore[type-arg]
    """def test_plait_run_chunks_tp_blocks: examples/tiny-tp2-chunks.toml (tp=2 with sequence parallelism, 4 chunks)
    trained by the runtime with its blocks chunked has the losses of the same plan with DTensor's whole collectives
    (within 1e-5), 4x their messages, and bytes = the cost model's: per layer, micro-batch and pass, each block's
    all-gather and reduce-scatter (Korthikanti et al. 2022, Sec. 4.2.2), each sized by tp_block_bytes."""
    model, (_, plan, _) = resolve_model(str(TINY)), read_plan_parts(PLAN)
    plan = replace(plan.with_seq_len(model.seq_len), precision="fp32")  # the check trains in fp32
    setup = Setup(model=model, cluster=get_cluster(H100), plan=plan, framework=get_engine("plait").framework)
    gathered, reduced = tp_block_bytes(setup)
    collectives = 2 * 2 * model.num_layers * plan.num_micro_batches  # 2 blocks x (forward + backward)
    for rank, result in ranks.items():
        run = result[PLAN.name]
        assert run["chunked"] == pytest.approx(run["whole"], rel=1e-5, abs=1e-5), rank
        assert run["chunked"][-1] < run["chunked"][0]  # it trains
        assert run["messages"] == [2 * collectives * plan.overlap_chunks] * 2, rank  # an all-gather and a reduce-scatter each
        assert run["buffer_bytes"] == [collectives * (gathered + reduced)] * 2, rank
        assert run["buffer_bytes"][0] == chunked_step_bytes(setup, [(False, False)] * model.num_layers)  # plait run's


def test_the_planner_searches_chunks_for_plait_as_chunking_every_feasible_plan_would() -> None:
    """For an engine that runs chunked collectives, the ranked plans equal those of giving every feasible plan its
    fastest chunk count and ranking them all (only the plans that can rank are estimated again); an engine that
    cannot keeps its plans unchunked."""
    from plait.search.refine import refine
    from plait.search.runner import run_search
    from plait.search.space import default_space

    model, cluster, plait = get_model("llama3-8b"), get_cluster(H100), get_engine("plait")
    space = replace(default_space(model, cluster, 8, (32,), seq_len=2048, precisions=("bf16",)), pp=(1, 2), cp=(1,),
                    micro_batches=(1, 2, 4), swap_activations=False, offload=((False, False),))
    result = run_search(model, cluster, space, engine=plait, workers=1)
    top = result.top(5)
    rows = [(result.feasible[chunk][1], row) for _, chunk, row in result.ranking()]
    every = sorted(with_best_chunks(refine(model, cluster, plait, rows, len(rows)), model, cluster, plait),
                   key=lambda e: -e.target_tokens_per_s)[:5]
    assert [e.plan for e in top] == [e.plan for e in every]
    assert [e.step_time_s for e in top] == [e.step_time_s for e in every]
    assert any(e.plan.overlap_chunks > 1 for e in top)  # a tp2 plan that chunking lifts into the five
    other = run_search(model, cluster, space, engine=get_engine(), workers=1).top(5)
    assert all(e.plan.overlap_chunks == 1 for e in other)
    chunked = next(e for e in top if e.plan.overlap_chunks > 1)
    verdict = chunk_verdict(model, cluster, plait, chunked)
    assert verdict is not None and verdict.applied and "applied" in verdict.text()


def _check_plait_run_chunks_expert_all_to_alls(ranks: dict[int, dict]) -> None:  # type: ignore[type-arg]
    """examples/tiny-moe-ep2-chunks.toml (ep=2 over 2 replicas, 4 chunks): the chunked dispatch and combine give
    the losses of the whole ones within 1e-5 with 4x their messages; a rank's bytes follow its routing (it sends
    back what its experts received), so the two ranks' sum is compared: 2 x the cost model's balanced bytes per rank
    (per MoE layer, micro-batch and pass a dispatch and a combine of tokens x top_k rows)."""
    model, (_, plan, _) = resolve_model(str(TINY_MOE)), read_plan_parts(MOE_PLAN)
    plan = replace(plan.with_seq_len(model.seq_len), precision="fp32")
    setup = Setup(model=model, cluster=get_cluster(H100), plan=plan, framework=get_engine("plait").framework)
    moe_layers = sum(model.is_moe_layer(i) for i in range(model.num_layers))
    per_rank = 2 * 2 * moe_layers * plan.num_micro_batches * ep_send_bytes(setup)
    assert chunked_step_bytes(setup, [(model.is_moe_layer(i), False) for i in range(model.num_layers)]) == per_rank
    runs = [result[MOE_PLAN.name] for result in ranks.values()]
    for run in runs:
        assert run["chunked"] == pytest.approx(run["whole"], rel=1e-5, abs=1e-5)
        assert run["messages"] == [4 * moe_layers * plan.num_micro_batches * plan.overlap_chunks] * 2
    assert [sum(b) for b in zip(*(run["buffer_bytes"] for run in runs))] == [2 * per_rank] * 2
