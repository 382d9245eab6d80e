"""Context parallelism on gloo ranks: plait's ring, all-to-all (Ulysses) and fused all-gather (LSS) attention on
torch.distributed.

Each layout trains examples/tiny-model.toml (4 layers, 4 heads of 16, seq 64) in fp32 for 3 steps and must give the
one-process losses within 1e-5; the bytes each rank sends its cp peers in attention, counted as they leave, must be
the cost model's (:func:`plait.cost.context_parallel.cp_sent_bytes`) times layers and micro-batches. With a
``dp_sync`` method the cp ranks of a replica average their gradients, then the method runs across replicas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.context_parallel import cp_sent_bytes
from plait.cost.setup import Setup
from plait.cost.sync import payload_bytes
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.plan import Plan
from plait.plan.rules import first_violation
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes
from tests.conftest import toy_cluster_mapping
from tests.ranks import run_ranks

pytest.importorskip("torch")

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
STEPS = 3  # the third loss follows an AdamW update whose moments hold two gradients: magnitudes, not signs
BODY = 'global_batch = 8\nmicro_batch = 2\nprecision = "fp32"\n'


def toy_cluster():  # type: ignore[no-untyped-def]
    return cluster_from_mapping(toy_cluster_mapping(), "toy")


def run(nproc: int, body: str, folder: Path, name: str) -> list[dict]:
    plan, metrics = folder / f"{name}.toml", folder / f"{name}.jsonl"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\n{BODY}{body}\n')
    done = run_ranks(nproc, ["-m", "plait.run.worker", "--plan", str(plan), "--steps", str(STEPS),
                             "--metrics", str(metrics)])
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def losses(rows: list[dict]) -> list[float]:
    return [row["loss"] for row in rows]


# --- plan rules and the cost model's bytes, by hand ------------------------------------------------------

def test_ulysses_needs_cp_to_divide_the_heads_of_a_tp_rank() -> None:
    spec = resolve_model(str(MODEL))  # 4 heads
    assert first_violation(Plan(cp=2, cp_attention="ulysses", seq_len=64), spec, toy_cluster()) is None
    name, why = first_violation(Plan(cp=4, tp=2, cp_attention="ulysses", seq_len=64), spec, toy_cluster())
    assert name == "ulysses-divides-heads" and "cp=4 must divide num_heads/tp=4/2=2" in why
    odd = replace(spec, seq_len=66)  # 33 positions per rank: Ulysses' slices, not the ring's 4 chunks
    assert first_violation(Plan(cp=2, cp_attention="ulysses", seq_len=66), odd, toy_cluster()) is None
    assert "divisible by 2*cp=4" in first_violation(Plan(cp=2, seq_len=66), odd, toy_cluster())[1]
    with pytest.raises(ConfigError, match="cp_attention='zigzag' must be one of ring, ulysses, lss"):
        Plan(cp_attention="zigzag")  # type: ignore[arg-type]


def test_a_cp_flavour_without_cp_is_warned_about() -> None:
    """cp_attention picks how attention spans the cp ranks: with cp = 1 there are none, so ulysses or lss change
    nothing and say so (STYLE.md rule 11); the default ring, or any flavour with cp = 2, says nothing."""
    from plait.plan.rules import warnings

    spec, cluster = resolve_model(str(MODEL)), toy_cluster()
    for flavour in ("ulysses", "lss"):
        assert f"cp_attention={flavour} has no effect with cp=1" in warnings(Plan(cp_attention=flavour), spec, cluster)
        assert not [w for w in warnings(Plan(cp=2, cp_attention=flavour), spec, cluster) if "cp_attention" in w]
    assert not [w for w in warnings(Plan(), spec, cluster) if "cp_attention" in w]


def test_dp_sync_with_cp_runs_unsharded_only() -> None:
    spec = resolve_model(str(MODEL))
    ok = Plan(cp=2, dp_replicate=2, dp_sync="local_sgd:every=2", seq_len=64, global_batch=8)
    assert first_violation(ok, spec, toy_cluster()) is None
    name, why = first_violation(replace(ok, dp_replicate=1, dp_shard=2, sharding="zero2"), spec, toy_cluster())
    assert name == "dp-sync-no-context-parallel" and "needs sharding='none' (got 'zero2')" in why


def test_cp_bytes_by_hand() -> None:
    """One rank's K and V for 2 sequences of 4096/2 tokens, 8 KV heads of 128 + 128, bf16: 2 * 2048 * 8 * 256 * 2
    bytes. The ring sends it once forward and twice backward (K/V again, then their gradients); the all-gather
    sends it once each way and the fp32 gradients cp times; Ulysses moves half of Q (32 heads), K, V and the
    output (32 heads) each way."""
    model = replace(resolve_model("llama3-8b"), num_layers=1)
    plan = Plan(cp=2, micro_batch=2, global_batch=2, seq_len=4096)
    facts = get_engine("megatron-core").framework  # no K/V repeat: 8 KV heads
    block = 2 * 2048 * 8 * 256 * 2
    ring = Setup(model=model, cluster=toy_cluster(), plan=plan, framework=replace(facts, cp_kv_exchange="ring"))
    assert cp_sent_bytes(ring) == (block, 2 * block)
    gather = replace(ring, framework=replace(facts, cp_kv_exchange="allgather"))
    assert cp_sent_bytes(gather) == (block, block + 2 * 2 * block)
    ulysses = replace(ring, plan=replace(plan, cp_attention="ulysses"))
    half = 2 * 2048 * (32 * 128 + 8 * 256 + 32 * 128) * 2 / 2
    assert cp_sent_bytes(ulysses) == (half, half)
    lss = replace(ring, plan=replace(plan, cp_attention="lss"))  # one all-gather forward, one reduce-scatter back
    assert cp_sent_bytes(lss) == (block, block)
    four = replace(lss, plan=replace(plan, cp=4, cp_attention="lss"))  # 1024 tokens a rank, 3 blocks each way
    assert cp_sent_bytes(four) == (3 * block / 2, 3 * block / 2)


def test_lss_keeps_the_gathered_kv_and_pays_one_latency_per_pass() -> None:
    """LSS saves the other ranks' K/V for the backward: on llama3-8b (8 KV heads of 128 + 128), cp=4, 4096 tokens,
    bf16, 3 blocks of 1 * 1024 * 8 * 256 * 2 bytes more than the ring per layer, and its mask as a bf16 bias. Its exchange is one all-gather
    and one reduce-scatter of the 4 blocks (cp ranks on the toy cluster's NVLink), whatever the attention time."""
    from plait.cost import collectives as coll
    from plait.cost.activations import attention_block_bytes
    from plait.cost.context_parallel import cp_exchange_s

    model = resolve_model("llama3-8b")
    plan = Plan(cp=4, micro_batch=1, global_batch=1, seq_len=4096)
    facts = get_engine("megatron-core").framework
    ring = Setup(model=model, cluster=toy_cluster(), plan=plan, framework=facts)
    lss = replace(ring, plan=replace(plan, cp_attention="lss"))
    block = 1024 * 8 * 256 * 2
    assert attention_block_bytes(lss)[0] - attention_block_bytes(ring)[0] == 3 * block
    # and its [1024, 4096] visibility mask, a bf16 bias the kernel keeps, in the core selective recompute drops
    assert attention_block_bytes(lss)[1] - attention_block_bytes(ring)[1] == 1024 * 4096 * 2
    link = coll.group_link(toy_cluster(), 4, 1)
    expected = (coll.all_gather_s(4 * block, link), coll.reduce_scatter_s(4 * block, link))
    assert cp_exchange_s(lss, 1.0, 2.0) == cp_exchange_s(lss, 0.0, 0.0) == expected
    # plait's runtime copies K/V out to the 32 query heads before attention; LSS sends and keeps one copy of each
    # of the 8: a quarter of the ring's block per peer, and at cp=2 two 8-head blocks kept instead of one 32-head
    plait = replace(lss, plan=replace(plan, cp=2, cp_attention="lss"), framework=get_engine("plait").framework)
    plait_ring = replace(plait, plan=replace(plan, cp=2))
    assert cp_sent_bytes(plait) == (block * 2, block * 2)  # 2048 tokens of 8 heads
    assert cp_sent_bytes(plait_ring)[0] == 4 * cp_sent_bytes(plait)[0]
    assert attention_block_bytes(plait)[0] - attention_block_bytes(plait_ring)[0] == 2 * 2048 * (2 * 8 - 32) * 256


def test_cp_ranks_of_a_replica_all_reduce_fp32_gradients_under_a_method() -> None:
    """1e9 parameters, fp32: a ring all-reduce moves 2 (g - 1) / g of 4e9 bytes over the toy cluster's 100 GB/s
    NVLink with no latency (Patarasuk & Yuan 2009): 0.04 s on 2 cp ranks, 0.06 s on 4, nothing without CP."""
    from plait.cost.method_rows import cp_gradient_reduce_s
    from plait.plan.columns import PlanColumns

    params = {"dense": 1e9, "expert": 0.0}
    got = [cp_gradient_reduce_s(toy_cluster(), PlanColumns.one(Plan(cp=c, dp_replicate=2)), params) for c in (1, 2, 4)]
    assert got == pytest.approx([0.0, 0.04, 0.06], rel=1e-12)


def test_ulysses_attends_over_the_whole_sequence_with_fewer_heads() -> None:
    """Under Ulysses a rank attends over all 4096 positions for half the heads: the same FLOPs at the same sequence
    length as one rank holding half the batch without CP, so the same attention-core time (the ring's blocks are
    cp-sized instead)."""
    from plait.cost.layer import _attention_core_s
    from plait.hardware.catalog import get_cluster

    model, facts = resolve_model("llama3-8b"), get_engine("megatron-core").framework
    plan = Plan(cp=2, cp_attention="ulysses", micro_batch=2, global_batch=2, seq_len=4096)
    ulysses = Setup(model=model, cluster=get_cluster("dgx-h100-ib"), plan=plan, framework=facts)  # FA2 curve
    half_batch = replace(ulysses, plan=Plan(micro_batch=1, global_batch=1, seq_len=4096))
    ring = replace(ulysses, plan=replace(plan, cp_attention="ring"))
    assert _attention_core_s(ulysses) == pytest.approx(_attention_core_s(half_batch), rel=1e-12)
    assert _attention_core_s(ring)[0] > 1.05 * _attention_core_s(ulysses)[0]  # 2048-token blocks run slower


# --- training on gloo ranks ------------------------------------------------------------------------------

def _predicted_cp_bytes(body: str, forwards: int = 1, backwards: int = 1) -> int:
    """The cost model's CP bytes of one step: per layer and micro-batch, forward and backward, times the 4 / pp
    layers of the reporting (last-stage) rank and 8 / 2 / dp micro-batches, for plait's engine as ``plait run`` prices a CPU run (its own point-to-point ring;
    PyTorch's all-gather is the CUDA path)."""
    plan = Plan(**{k: v.strip('"') if '"' in v else int(v) for k, v in
                   (line.split(" = ") for line in (BODY + body).strip().splitlines())})
    spec = resolve_model(str(MODEL))
    facts = get_engine("plait[cp_exchange=ring]").framework
    setup = Setup(model=spec, cluster=toy_cluster(), plan=plan.with_seq_len(spec.seq_len), framework=facts)
    fwd, bwd = cp_sent_bytes(setup)
    return int((forwards * fwd + backwards * bwd) * spec.num_layers // plan.pp * plan.num_micro_batches)


@pytest.mark.slow
def test_cp_layouts_match_one_process_and_send_the_predicted_bytes(tmp_path: Path) -> None:
    reference = losses(run(1, "", tmp_path, "one"))
    for nproc, name, body in ((2, "ring", "cp = 2"), (2, "ulysses", 'cp = 2\ncp_attention = "ulysses"'),
                              (2, "lss", 'cp = 2\ncp_attention = "lss"'),
                              (2, "cp2-zero3", 'cp = 2\nsharding = "zero3"'), (4, "dp2xcp2", "cp = 2\ndp_replicate = 2"),
                              (4, "tp2xcp2-ulysses", 'cp = 2\ntp = 2\ncp_attention = "ulysses"\nsharding = "zero3"'),
                              (4, "pp2xcp2", 'cp = 2\npp = 2\nsharding = "zero3"')):
        rows = run(nproc, body, tmp_path, name)
        assert losses(rows) == pytest.approx(reference, rel=1e-5), name
        assert rows[-1]["loss"] < rows[0]["loss"]
        step = _predicted_cp_bytes(body)
        # PyTorch pipelining's metadata inference runs each stage's forward and backward once, on one micro-batch of
        # real tensors, in the first step (torch/distributed/pipelining/stage.py _forward_metadata_inference)
        first = step + step // 4 if "pp = 2" in body else step  # 4 micro-batches of 2 sequences per step
        assert [row["cp_bytes"] for row in rows] == [first] + [step] * (STEPS - 1), name
    # full recompute runs each layer's forward, its K/V exchange included, again before its backward (the cost
    # model's recompute_s holds cp_fwd_s); selective recompute leaves the CP attention alone (it stores no scores)
    for recompute, passes in (("full", (2, 1)), ("selective", (1, 1))):
        body = f'cp = 2\nrecompute = "{recompute}"'
        rows = run(2, body, tmp_path, f"cp2-{recompute}")
        assert losses(rows) == pytest.approx(reference, rel=1e-5), recompute
        assert [row["cp_bytes"] for row in rows] == [_predicted_cp_bytes(body, *passes)] * STEPS, recompute


@pytest.mark.slow
def test_cp_composes_with_dp_sync_methods(tmp_path: Path) -> None:
    """dp_replicate=2 x cp=2: each replica is the one-rank replica split over the sequence, so local SGD after every
    step trains as it does over 2 unsplit replicas, and top-k keeping every entry as DDP's all-reduce (lossless);
    top-k at 10% (lossy) trains; the bytes counted on the replica group are the method's for the whole model
    (cp does not split the parameters)."""
    local, lossless, lossy = "local_sgd:every=1", "topk:ratio=1", "topk:ratio=0.1"
    for spec, reference_body in ((local, f'dp_sync = "{local}"'), (lossless, "")):
        reference = losses(run(2, f"dp_replicate = 2\n{reference_body}", tmp_path, f"whole-{spec[:5]}"))
        rows = run(4, f'cp = 2\ndp_replicate = 2\ndp_sync = "{spec}"', tmp_path, f"cp-{spec[:5]}")
        assert losses(rows) == pytest.approx(reference, rel=1e-5), spec
    rows = run(4, f'cp = 2\ndp_replicate = 2\ndp_sync = "{lossy}"', tmp_path, "cp-lossy")
    assert rows[-1]["loss"] < rows[0]["loss"]
    named = parameter_shapes(resolve_model(str(MODEL)))
    assert [row["sync_bytes"] for row in rows] == [payload_bytes(parse(lossy), named, s) for s in range(STEPS)]


@pytest.mark.slow
def test_plait_run_trains_cp_on_cpu_ranks(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\n{BODY}cp = 2\n')
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "2"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step 2" in out.stderr + out.stdout


def test_the_planner_tries_every_flavour_an_engine_runs() -> None:
    """plait runs ring, Ulysses and LSS: each layout with cp > 1 is enumerated with each, cp = 1 once. Megatron-Core
    refuses Ulysses and LSS (the capability table), so its space keeps the ring alone."""
    from plait.hardware.catalog import get_cluster
    from plait.search.enumerate import enumerate_space
    from plait.search.space import default_space, for_engine

    model = resolve_model("llama3-8b")
    space = replace(default_space(model, get_cluster("dgx-h100-ib"), 16, (16,), seq_len=65536), tp=(1,), pp=(1,))
    assert for_engine(space, get_engine("megatron-core")).cp_attentions == ("ring",)
    searched = for_engine(space, get_engine("plait"))
    assert searched.cp_attentions == ("ring", "ulysses", "lss")
    cols = enumerate_space(model, searched)
    ring = enumerate_space(model, replace(searched, cp_attentions=("ring",)))
    per_cp = {c: int((ring["cp"] == c).sum()) for c in space.cp}
    for c, rows in per_cp.items():
        assert int((cols["cp"] == c).sum()) == rows * (1 if c == 1 else 3), c
