"""2-D (SUMMA) and 2.5-D (Tesseract) tensor-parallel grids: plan rules, the cost model's bytes by hand, estimates,
and one layer on 4 gloo ranks equal to one process with the bytes the cost model predicts."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.tp2d import pass_traffic
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.plan.rules import check_plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model, resolve_model
from plait.workload.model import ModelSpec

ROOT = Path(__file__).parents[1]
TOY = ModelSpec(name="toy", num_layers=1, hidden_size=8, num_heads=2, num_kv_heads=2, head_dim=4, ffn_hidden_size=8,
                mlp="plain", vocab_size=16, seq_len=4, norm="rmsnorm")


def test_bytes_of_one_linear_by_hand() -> None:
    """One 8 x 8 linear, 8 tokens, 2-byte elements on a 2 x 2 grid: an activation block is 4 tokens x 4 = 32 B,
    a weight block 4 x 4 = 32 B, each broadcast twice (q = 2 steps); the two norms' statistics are 4 tokens x 4 B,
    their weight slices 4 x 2 B."""
    fwd, bwd = pass_traffic(TOY, Plan(tp=4, tp_mode="2d"), 8, [(8, 8)], 2, 2)
    assert fwd.bytes_ == {("row", "broadcast"): 64, ("col", "broadcast"): 64, ("row", "all_reduce"): 32}
    assert bwd.bytes_ == {("row", "broadcast"): 64, ("row", "reduce"): 64, ("col", "broadcast"): 64,
                          ("col", "reduce"): 64, ("row", "all_reduce"): 32, ("col", "all_reduce"): 16}
    # 2 grids of 2 x 2: each row holds 2 tokens (16 B blocks); the weight block and norm slices are summed over depth
    fwd, bwd = pass_traffic(TOY, Plan(tp=8, tp_mode="2.5d", tp_depth=2), 8, [(8, 8)], 2, 2)
    assert fwd.bytes_[("row", "broadcast")] == 32 and fwd.bytes_[("col", "broadcast")] == 64
    assert bwd.bytes_[("depth", "all_reduce")] == 32 + 2 * 8 and bwd.ops[("depth", "all_reduce")] == 3


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"tp": 8, "tp_mode": "2d"}, "tp_mode='2d' needs tp = q*q"),
    ({"tp": 4, "tp_depth": 2}, "tp_depth=2 needs tp_mode='2.5d'"),
    ({"tp": 4, "tp_mode": "2.5d", "tp_depth": 1}, "needs tp_depth >= 2"),
    ({"tp": 8, "tp_mode": "2.5d", "tp_depth": 2, "micro_batch": 2}, "micro_batch=2 must be divisible by 4"),
    ({"tp": 16, "tp_mode": "2d", "micro_batch": 4, "cp": 2}, "not with cp=2"),
])
def test_a_plan_that_is_no_grid_is_refused_naming_the_rule(fields: dict, fragment: str) -> None:
    plan = Plan(global_batch=64, seq_len=8192, **{"micro_batch": 4, **fields})
    with pytest.raises(ConfigError) as refused:
        check_plan(plan, get_model("llama3-8b"), get_cluster("dgx-h100-ib"))
    assert fragment in str(refused.value)
    check_plan(Plan(tp=16, tp_mode="2d", micro_batch=4, global_batch=64), get_model("llama3-8b"),
               get_cluster("dgx-h100-ib"))


def test_a_grid_of_a_moe_model_and_a_bad_file_value_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        check_plan(Plan(tp=4, tp_mode="2d", micro_batch=2, global_batch=8), resolve_model(str(ROOT / "examples" /
                   "tiny-moe.toml")), get_cluster("dgx-h100-ib"))
    bad = tmp_path / "plan.toml"
    bad.write_text((ROOT / "examples" / "llama3-70b-tp2d.toml").read_text().replace('"2d"', '"3d"'))
    out = subprocess.run([sys.executable, "-m", "plait", "estimate", "--plan", str(bad)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2 and "tp_mode='3d' must be one of 1d, 2d, 2.5d" in out.stderr
    assert "Traceback" not in out.stderr


def test_grid_weights_and_traffic_in_an_estimate() -> None:
    """Llama 3 70B, tp 16 over two DGX nodes: a 4 x 4 grid keeps 1-D's weights per GPU (matrices in 1/16 blocks),
    a 2.5-D grid of depth 4 (2 x 2 x 4) four times a layer's matrices; both cost other TP traffic than 1-D."""
    model, cluster, engine = get_model("llama3-70b"), get_cluster("dgx-h100-ib"), get_engine("megatron-core")
    one = Plan(tp=16, sp=True, pp=4, micro_batch=8, global_batch=64)
    flat = estimate(model, cluster, one, engine=engine)
    grid = estimate(model, cluster, replace(one, tp_mode="2d"), engine=engine)
    deep = estimate(model, cluster, replace(one, tp_mode="2.5d", tp_depth=4), engine=engine)
    assert grid.memory.weights_bytes == pytest.approx(flat.memory.weights_bytes, rel=0.01)
    assert deep.memory.weights_bytes > 3 * grid.memory.weights_bytes
    assert grid.memory.activations_bytes == flat.memory.activations_bytes  # 1-D+SP splits them as the grid does
    assert grid.time.tp_comm_s != flat.time.tp_comm_s != deep.time.tp_comm_s


GRID_PLAN = (f'[job]\nmodel = "{ROOT / "examples" / "tiny-model.toml"}"\n'
             '[plan]\nglobal_batch = 8\nmicro_batch = 2\nprecision = "fp32"\ntp = 4\ntp_mode = "2d"\n')
STEPS = 3


def _one_process_losses(steps: int) -> list[float]:
    """The tiny model trained in this process without any parallelism: plain AdamW over the global batch's
    micro-batches, torch's own clipping (the reference the grid run must equal)."""
    import torch

    from plait.run import data
    from plait.run.model import build_model
    from plait.run.optim import optimizer_recipe
    from plait.run.train import TrainConfig, lr_lambda
    from plait.run.worker_config import SEED, WorkerConfig

    spec = resolve_model(str(ROOT / "examples" / "tiny-model.toml"))
    model = build_model(spec, spec.seq_len, SEED)
    config = TrainConfig(steps=steps, lr=WorkerConfig(plan=Path("x")).lr, seed=SEED)
    optimizer_class, kwargs = optimizer_recipe("adamw", config)
    optimizer = optimizer_class(model.parameters(), **kwargs)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
    losses = []
    for step in range(steps):
        inputs, targets = data.global_batch(step, 8, spec.seq_len)
        total = 0.0
        for x, y in zip(inputs.split(2), targets.split(2)):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()) / 4
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(total)
    return losses


@pytest.mark.slow
def test_a_grid_layer_and_a_grid_plan_on_four_gloo_ranks_match_one_process_with_the_predicted_bytes(
        tmp_path: Path) -> None:
    """A 2 x 2 grid (4 ranks). One transformer layer's forward and backward (SUMMA linears, split RMSNorms,
    attention over local heads and sequences) equal the one-process layer within 1e-5, and every rank's bytes per
    group and collective equal :func:`plait.cost.tp2d.pass_traffic`'s. Then the same ranks train the tiny model
    on the grid as ``plait run`` does: its losses equal one process's within 1e-5, the layers' bytes per step
    equal the cost model's (:func:`plait.cost.tp2d.grid_layer` per layer and micro-batch), the embedding's,
    final norm's and head's the hand count below."""
    pytest.importorskip("torch")
    from plait.cost.setup import Setup
    from plait.cost.tp2d import grid_layer
    from tests.ranks import run_ranks

    plan_file, metrics = tmp_path / "grid.toml", tmp_path / "metrics.jsonl"
    plan_file.write_text(GRID_PLAN)
    done = run_ranks(4, ["-m", "plait.run.tp2d_check", "--out", str(tmp_path), "--plan", str(plan_file),
                         "--steps", str(STEPS), "--metrics", str(metrics)], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for rank in range(4):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["max_diff"] <= 1e-5
        assert result["forward"] == result["forward_predicted"]
        assert result["backward"] == result["backward_predicted"]
        assert result["forward"]["row/broadcast"] > 0 and result["backward"]["col/reduce"] > 0
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert max(abs(r["loss"] - ref) for r, ref in zip(rows, _one_process_losses(STEPS), strict=True)) <= 1e-5
    spec = resolve_model(str(ROOT / "examples" / "tiny-model.toml"))
    plan = Plan(tp=4, tp_mode="2d", micro_batch=2, global_batch=8, precision="fp32", seq_len=spec.seq_len)
    layer = grid_layer(Setup(model=spec, cluster=get_cluster("dgx-h100-ib"), plan=plan,
                             framework=get_engine("plait").framework))
    per_step = {f"layers/{g}/{k}": 0 for g, k in [*layer.fwd.bytes_, *layer.bwd.bytes_]}
    for traffic in (layer.fwd, layer.bwd):
        for (g, k), v in traffic.bytes_.items():
            per_step[f"layers/{g}/{k}"] += int(v) * spec.num_layers * plan.num_micro_batches
    tokens, vocab, width = 64, spec.vocab_size, spec.hidden_size // 2  # a row's 1 sequence of 64 per micro-batch
    edges = {"edges/row/all_reduce": 4 * plan.num_micro_batches * (2 * tokens + tokens * vocab),  # norm fwd+bwd, logits
             "edges/col/all_reduce": 4 * (vocab * width + width + width * vocab),  # embedding, norm, head grads
             "edges/grid/all_reduce": 4}  # the squared gradient norm
    for row in rows:
        assert row["grid_bytes"] == {**per_step, **edges}


def test_a_grid_wins_where_a_large_tp_group_spans_a_slow_tier_and_loses_on_nvlink_at_small_tp() -> None:
    """Per linear and rank a grid moves ``T k/(q d) + k n/q`` against 1-D's ``T k``: with 16 x 8k tokens per
    micro-batch over 4 PCIe nodes joined by 50 Gb/s Ethernet (tp = 16), the activations it saves outweigh the
    weight blocks it broadcasts; with tp = 4 inside an NVLink node the 1-D collectives are cheaper."""
    engine = get_engine("megatron-core")
    model, slow = get_model("llama3-8b"), get_cluster("aws-g5-24xlarge")
    wide = Plan(tp=16, sp=True, micro_batch=16, global_batch=64)
    times = [estimate(model, slow, replace(wide, tp_mode=m, tp_depth=d), engine=engine).time.tp_comm_s
             for m, d in (("1d", 1), ("2d", 1), ("2.5d", 4))]
    assert times[2] < times[1] < times[0]
    small = Plan(tp=4, sp=True, micro_batch=4, global_batch=64)
    fast = get_cluster("dgx-h100-ib")
    assert (estimate(model, fast, small, engine=engine).step_time_s
            < estimate(model, fast, replace(small, tp_mode="2d"), engine=engine).step_time_s)


def test_the_planner_costs_grids_only_as_a_what_if_and_says_so() -> None:
    from plait.search.runner import run_search
    from plait.search.space import default_space
    from plait.search.tp_grids import grid_verdict, what_if

    model, cluster, engine = get_model("llama3-8b"), get_cluster("aws-g5-24xlarge"), get_engine("megatron-core")
    space = default_space(model, cluster, 16, (16,), allow_tp_across_nodes=True)
    plain = run_search(model, cluster, space, engine=engine, workers=1)
    assert not plain.space.tp_grids and "not searched: megatron-core" in (grid_verdict(plain) or "")
    searched = run_search(model, cluster, space, engine=what_if(engine), workers=1)
    modes = {int(cols["tp_mode"][r]) for cols, _, rows in searched.feasible for r in rows}
    assert len(modes) > 1 and searched.num_candidates > plain.num_candidates
    verdict = grid_verdict(searched) or ""
    assert "(what-if: megatron-core does not run grids)" in verdict and "s/step" in verdict


def test_a_grid_plan_file_round_trips(tmp_path: Path) -> None:
    from plait.plan.io import plan_to_toml, read_plan_file

    plan = Plan(tp=8, tp_mode="2.5d", tp_depth=2, sp=True, micro_batch=4, global_batch=64)
    path = tmp_path / "plan.toml"
    path.write_text(plan_to_toml(plan))
    assert 'tp_mode = "2.5d"' in path.read_text() and read_plan_file(path)[1] == plan
    assert plan.describe().startswith("tp8(2.5d x2) ")


def test_plait_runs_a_grid_alone_and_its_planner_searches_grids_without_the_what_if() -> None:
    """Engine plait trains a grid as the whole job (:mod:`plait.run.tp2d_train`): data parallelism or sharding
    beside it is refused naming both; its search holds grid rows without ``--tp-grids``, and says no what-if."""
    from plait.engine.capability import first_unsupported
    from plait.search.runner import run_search
    from plait.search.space import default_space
    from plait.search.tp_grids import grid_verdict

    engine, tiny = get_engine("plait"), resolve_model(str(ROOT / "examples" / "tiny-model.toml"))
    alone = Plan(tp=4, tp_mode="2d", micro_batch=2, global_batch=8, seq_len=64)
    assert first_unsupported(alone, tiny, engine) is None
    beside = first_unsupported(replace(alone, dp_shard=2, sharding="zero3", global_batch=16), tiny, engine) or ""
    assert beside.startswith("tp_mode='2d' with dp=2, sharding='zero3' is not supported by plait")
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100-ib")
    result = run_search(model, cluster, default_space(model, cluster, 16, (16,), allow_tp_across_nodes=True),
                        engine=engine, workers=1)
    grids = [cols.plan(r) for cols, _, rows in result.feasible for r in rows if cols["tp_mode"][r] != 0]
    assert grids and all(p.dp == 1 and p.pp == 1 and p.precision != "fp8" for p in grids)
    verdict = grid_verdict(result) or ""
    assert "the best grid is" in verdict and "what-if" not in verdict
