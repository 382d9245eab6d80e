"""The capability table, option by option and engine by engine: every plan option the planner can emit either runs
or is refused before launch with a message naming it — no third outcome.

For plait's runtime on this CPU "runs" means a test of the suite trains that option (a parity test against one
process, or a training run for options that change numerics); the registry below names that test and this file
checks it exists. For the other engines "runs" means the exporter writes the plan for them (and torchtitan's own
config parser accepts it); otherwise the refusal must name the option and the engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from plait.engine.capability import FEATURES, first_unsupported
from plait.engine.catalog import engine_names, get_engine
from plait.errors import ConfigError
from plait.export.bundle import export_for
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workload.catalog import get_model, resolve_model
from tests.ranks import run_ranks

ROOT = Path(__file__).parents[1]
TINY, TINY_MOE = ROOT / "examples" / "tiny-model.toml", ROOT / "examples" / "tiny-moe.toml"
GPT = "gpt3-1.3b"  # learned positions

# option -> (plan fields, model): one plan per option the planner's space (search/space.py) can hold, on 2-4 ranks.
OPTIONS: dict[str, tuple[dict[str, object], str]] = {
    "tp": ({"tp": 2, "sp": True}, "dense"),
    "sp": ({"tp": 2, "sp": True}, "dense"),
    "tp_grid": ({"tp": 4, "tp_mode": "2d"}, "dense"),
    "pp": ({"pp": 2}, "dense"),
    "schedule=1f1b": ({"pp": 2, "schedule": "1f1b"}, "dense"),
    "schedule=gpipe": ({"pp": 2, "schedule": "gpipe"}, "dense"),
    "schedule=interleaved": ({"pp": 2, "vpp": 2, "schedule": "interleaved"}, "dense"),
    "schedule=zb-h1": ({"pp": 2, "schedule": "zb-h1"}, "dense"),
    "cp": ({"cp": 2, "dp_shard": 1, "sharding": "zero3"}, "dense"),
    "cp_attention=ulysses": ({"cp": 2, "cp_attention": "ulysses"}, "dense"),
    "cp_attention=lss": ({"cp": 2, "cp_attention": "lss"}, "dense"),
    "ep": ({"dp_replicate": 2, "ep": 2}, "moe"),
    "moe": ({"dp_replicate": 2}, "moe"),
    "sharding=zero1": ({"dp_shard": 2, "sharding": "zero1"}, "dense"),
    "sharding=zero2": ({"dp_shard": 2, "sharding": "zero2"}, "dense"),
    "sharding=zero3": ({"dp_shard": 2, "sharding": "zero3"}, "dense"),
    "hsdp": ({"dp_replicate": 2, "dp_shard": 2, "sharding": "zero3"}, "dense"),
    "recompute=selective": ({"dp_replicate": 2, "recompute": "selective"}, "dense"),
    "recompute=full": ({"dp_shard": 2, "sharding": "zero3", "recompute": "full"}, "dense"),
    "recompute_layers": ({"dp_shard": 2, "sharding": "zero3", "recompute": "full", "recompute_layers": 2}, "dense"),
    "precision=fp16": ({"dp_shard": 2, "sharding": "zero3", "precision": "fp16"}, "dense"),
    "precision=fp8": ({"dp_shard": 2, "sharding": "zero3", "precision": "fp8"}, "dense"),
    "grad_reduce_dtype=bf16": ({"dp_shard": 2, "sharding": "zero3", "grad_reduce_dtype": "bf16"}, "dense"),
    "optimizer=sgd": ({"dp_shard": 2, "sharding": "zero1", "optimizer": "sgd"}, "dense"),
    "offload_optimizer": ({"dp_replicate": 2, "offload_optimizer": True}, "dense"),
    "offload_params": ({"dp_shard": 2, "sharding": "zero3", "offload_optimizer": True, "offload_params": True}, "dense"),
    "offload_params_alone": ({"dp_shard": 2, "sharding": "zero3", "offload_params": True}, "dense"),
    "swap_activations": ({"dp_replicate": 2, "swap_activations": True}, "dense"),
    "swap_layers": ({"dp_replicate": 2, "swap_activations": True, "swap_layers": 2}, "dense"),
    "tp_comm_overlap": ({"tp": 2, "sp": True, "tp_comm_overlap": True}, "dense"),
    "overlap_chunks": ({"tp": 2, "sp": True, "overlap_chunks": 2}, "dense"),
    "learned_positions_sp": ({"tp": 2, "sp": True}, "gpt"),
    "dp_sync": ({"dp_replicate": 2, "dp_sync": "powersgd:rank=2"}, "dense"),
    "dp_sync_server_ranks": ({"dp_replicate": 2, "dp_sync": "async_ps:staleness=2"}, "dense"),
}

# plait's runtime on a CPU: option -> (test file, a marker in it naming the case that trains that option).
TRAINED_BY: dict[str, tuple[str, str]] = {
    "tp": ("test_runtime.py", '"tp2-sp"'), "sp": ("test_runtime.py", '"tp2-sp"'),
    "tp_grid": ("test_tp2d.py", "def test_a_grid_layer_and_a_grid_plan_on_four_gloo_ranks"),
    "pp": ("test_runtime.py", '"pp2-1f1b"'), "schedule=1f1b": ("test_runtime.py", '"pp2-1f1b"'),
    "schedule=gpipe": ("test_runtime.py", '"pp2-gpipe"'),
    "schedule=interleaved": ("test_runtime.py", '"pp2-interleaved"'),
    "schedule=zb-h1": ("test_runtime_zb.py", "def test_zb_h1_pp2_matches_single_process"),
    "cp": ("test_context_parallel_gloo.py", '"cp2-zero3"'),
    "cp_attention=ulysses": ("test_context_parallel_gloo.py", '(2, "ulysses"'),
    "cp_attention=lss": ("test_context_parallel_gloo.py", '(2, "lss"'),
    "ep": ("test_runtime_moe.py", '"ep2-ddp"'), "moe": ("test_runtime_moe.py", '"ep2-ddp"'),
    "sharding=zero1": ("test_runtime.py", '"zero1"'), "sharding=zero2": ("test_runtime.py", '"fsdp-zero2"'),
    "sharding=zero3": ("test_runtime.py", '"fsdp-zero3"'), "hsdp": ("test_runtime.py", '"hsdp"'),
    "recompute=selective": ("test_runtime.py", '"recompute-selective"'),
    "recompute=full": ("test_runtime.py", '"recompute-full"'),
    "recompute_layers": ("test_runtime.py", '"recompute-partial"'),
    "precision=fp16": ("test_capability_table.py", "def test_numerics_options_train"),
    "grad_reduce_dtype=bf16": ("test_capability_table.py", "def test_numerics_options_train"),
    "precision=fp8": ("test_runtime_gpu.py", "def test_fp8_trains_on_this_cpu"),
    "optimizer=sgd": ("test_runtime_optim.py", '"sgd-zero1"'),
    "offload_optimizer": ("test_runtime_optim.py", '"offload-optimizer-ddp"'),
    "offload_params": ("test_runtime_optim.py", '"offload-params-zero3"'),
    "swap_activations": ("test_swap_activations.py", "def test_swap_matches_no_swap_on_two_gloo_ranks"),
    "swap_layers": ("test_swap_activations.py", "def test_swapping_some_layers_matches_no_swap_on_two_gloo_ranks"),
    "overlap_chunks": ("test_chunked_overlap.py", "def test_plait_run_chunks_tp_blocks"),
    "learned_positions_sp": ("test_runtime_positions.py", "def test_learned_positions_with_tp2_sp_match_single_process"),
    "dp_sync": ("test_sync.py", "def test_plait_run_trains_a_dp_sync_plan"),
    "dp_sync_server_ranks": ("test_async_run.py", "def test_plait_run_starts_the_server_ranks_and_trains"),
}


def _model(kind: str):  # type: ignore[no-untyped-def]
    return {"dense": lambda: resolve_model(str(TINY)), "moe": lambda: resolve_model(str(TINY_MOE)),
            "gpt": lambda: get_model(GPT)}[kind]()


def _plan(fields: dict[str, object]) -> Plan:
    degree = 1
    for axis in ("dp_replicate", "dp_shard"):
        degree *= int(fields.get(axis, 1))  # type: ignore[call-overload]
    return Plan(global_batch=8 * degree, micro_batch=2, seq_len=64, **fields)  # type: ignore[arg-type]


def test_every_feature_an_engine_can_refuse_is_either_an_option_here_or_a_combination() -> None:
    """The table below covers each single option; the remaining features are combinations or model traits."""
    singles = set(OPTIONS)
    combos = {"mla", "alibi", "local_attention", "attention_sinks", "router_bias", "offload_optimizer_alone", "zero1_replicated", "zero1_tp", "ddp_with_tp", "offload_optimizer_zero1",
              "zb_micro_batches", "pp_fewer_micro_batches", "kv_head_replication", "moe_tp", "moe_cp", "ep_zero1", "ep_beyond_dp",
              "tp_comm_overlap_without_sp", "tp_comm_overlap_cp", "tp_comm_overlap_selective", "cp_learned_positions",
              "cp_head_dim", "recompute_layers_not_half", "swap_activations_pp", "swap_layers_all", "tp_grid_with", "tp_grid_model", "master_weights=false", "overlap_grad_reduce=false",
              "overlap_chunks_cp", "overlap_chunks_fp8", "overlap_chunks_grid"}
    assert set(FEATURES) == singles | combos


@pytest.mark.parametrize("option", OPTIONS)
def test_plait_runtime_on_this_cpu_runs_or_refuses(option: str) -> None:
    from plait.run.support import check_runnable

    fields, kind = OPTIONS[option]
    plan, model = _plan(fields), _model(kind)
    try:
        check_runnable(plan, model, on_gpu=False)
    except ConfigError as exc:
        assert option not in TRAINED_BY, f"{option} is refused but listed as trained: {exc}"
        assert FEATURES[option].describe(plan, model) in str(exc) or option.split("=")[0] in str(exc)
        assert "plait@0.1" in str(exc)
        return
    assert option in TRAINED_BY, f"{option} passes the checks but no test trains it"
    test_file, marker = TRAINED_BY[option]
    assert marker in (ROOT / "tests" / test_file).read_text(encoding="utf-8"), (option, test_file, marker)


@pytest.mark.parametrize("key", [k for k in engine_names() if k != "plait"])
def test_other_engines_export_or_refuse_every_option(key: str) -> None:
    engine = get_engine(key)
    model = get_model("llama3-8b")
    for option, (fields, kind) in OPTIONS.items():
        if kind != "dense":
            continue  # engines' MoE/GPT support is their model code's, not a plan option
        plan = _plan(fields)
        job = Job.checked(model, get_cluster("dgx-h100-ib"), plan.with_seq_len(model.seq_len), engine)  # exported as is
        refusal = first_unsupported(plan, model, engine)
        if refusal:
            named, rest = refusal.split(" is not supported by ", 1)
            cols = PlanColumns.from_plans([plan])
            assert rest.startswith(engine.spec) and named in {
                FEATURES[f].describe(plan, model) for f in engine.unsupported if FEATURES[f].present(cols, model)[0]}
            with pytest.raises(ConfigError, match="cannot export"):
                export_for(job, "llama3-8b", "dgx-h100-ib")
        else:
            artifacts = export_for(job, "llama3-8b", "dgx-h100-ib")
            assert artifacts[0].filename == "plan.toml" and f'engine = "{engine.spec}"' in artifacts[0].text


def test_torchtitan_parses_every_option_it_accepts() -> None:
    if os.environ.get("PLAIT_REQUIRE_TORCHTITAN") is None:
        pytest.importorskip("torchtitan")
    from torchtitan.config.manager import ConfigManager

    from plait.export.torchtitan import torchtitan_args

    manager, engine, model = ConfigManager(), get_engine("torchtitan"), get_model("llama3-8b")
    accepted = set()
    for option, (fields, kind) in OPTIONS.items():
        plan = _plan(fields)
        if kind == "dense" and first_unsupported(plan, model, engine) is None:
            config = manager.parse_args(torchtitan_args(plan, "llama3-8b", model)[0])
            assert config.parallelism.tensor_parallel_degree == plan.tp
            accepted.add(option)
    # torchtitan's own parallelisms and schedules all pass through its parser
    assert {"tp", "sp", "pp", "cp", "schedule=gpipe", "schedule=interleaved", "schedule=zb-h1", "sharding=zero2",
            "sharding=zero3", "hsdp", "recompute=full", "precision=fp8", "offload_params", "tp_comm_overlap"} <= accepted


@pytest.mark.parametrize("body", ['precision = "fp16"', 'grad_reduce_dtype = "bf16"'])
def test_numerics_options_train(body: str, tmp_path: Path) -> None:
    """Options that change numerics cannot match an fp32 reference; they must train: finite, falling loss."""
    pytest.importorskip("torch")
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[job]\nmodel = "{TINY}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\ndp_shard = 2\n'
                    f'sharding = "zero3"\n{body}\n')
    metrics = tmp_path / "m.jsonl"
    out = run_ranks(2, ["-m", "plait.run.worker", "--plan", str(plan), "--steps", "4", "--metrics", str(metrics)],
                    timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert len(losses) == 4 and all(loss == loss for loss in losses) and losses[-1] < losses[0]
