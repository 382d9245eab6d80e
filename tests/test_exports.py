"""Exports: each checked by the target tool's own configuration code where it installs here
(torchtitan), otherwise against a copy of its parser's schema (Megatron-LM, DeepSpeed)."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from plait.export.deepspeed import deepspeed_config
from plait.export.megatron import megatron_args
from plait.export.torchtitan import torchtitan_args
from plait.plan.io import JobSpec, read_plan_file, write_plan_file
from plait.plan.plan import Plan
from plait.workload.catalog import get_model

DATA = Path(__file__).parent / "data"
PLANS = [
    Plan(dp_shard=8, sharding="zero3", global_batch=64, micro_batch=2),
    Plan(tp=8, sp=True, pp=4, vpp=2, schedule="interleaved", dp_replicate=2, global_batch=64, recompute="selective"),
    Plan(tp=4, sp=True, pp=2, cp=2, dp_shard=4, sharding="zero1", global_batch=128, recompute="full",
         recompute_layers=4, precision="fp8", offload_optimizer=True),
    Plan(dp_replicate=2, dp_shard=8, sharding="zero3", global_batch=256, offload_params=True, offload_optimizer=True,
         grad_reduce_dtype="bf16"),
    Plan(tp=2, sp=True, pp=8, schedule="zb-h1", dp_shard=4, sharding="zero2", global_batch=64, precision="fp16"),
    Plan(dp_shard=8, sharding="zero3", global_batch=64, micro_batch=2, precision="fp32"),
    Plan(tp=2, sp=True, dp_shard=4, sharding="zero1", global_batch=64, precision="tf32"),
]
MODELS = ["llama3-8b", "llama3-70b", "llama3.1-405b"]


def _megatron_flags() -> dict[str, tuple[str, set[str]]]:
    flags = {}
    for line in (DATA / "megatron_lm_arguments.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split("\t")
        choices = {c for p in parts[2:] if p.startswith("choices=") for c in p[len("choices="):].split(",")}
        flags.setdefault(parts[0], (parts[1], choices))
    return flags


@pytest.mark.parametrize("plan", PLANS, ids=[p.describe() for p in PLANS])
@pytest.mark.parametrize("slug", MODELS)
def test_megatron_args_match_megatron_lm_parser(plan: Plan, slug: str) -> None:
    """Schema check: Megatron-LM's training package is not on PyPI, so flags are checked against its parser's
    flag list (tests/data/megatron_lm_arguments.txt, commit in its header)."""
    flags = _megatron_flags()
    args, _ = megatron_args(plan, get_model(slug))
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag in flags, f"{flag} is not a Megatron-LM argument"
        kind, choices = flags[flag]
        if kind == "value":
            value = args[i + 1]
            assert not value.startswith("--"), f"{flag} needs a value"
            assert not choices or value in choices, f"{flag}={value} not in {choices}"
            i += 2
        else:
            i += 1
    parsed = dict(zip(args[::1], args[1::1]))
    assert parsed["--tensor-model-parallel-size"] == str(plan.tp)
    assert parsed["--global-batch-size"] == str(plan.global_batch)


@pytest.mark.parametrize("plan", PLANS, ids=[p.describe() for p in PLANS])
def test_deepspeed_config_matches_schema_and_batch_rule(plan: Plan) -> None:
    """Schema check against DeepSpeed's own config classes (tests/data/deepspeed_config_schema.json)."""
    schema = json.loads((DATA / "deepspeed_config_schema.json").read_text())
    config, _ = deepspeed_config(plan)
    assert set(config) <= set(schema["top_level"])
    assert set(config["zero_optimization"]) <= set(schema["zero_optimization"])  # type: ignore[arg-type]
    for section in ("offload_optimizer", "offload_param"):
        sub = config["zero_optimization"].get(section, {})  # type: ignore[union-attr]
        assert set(sub) <= set(schema[f"zero_optimization.{section}"])
    assert set(config["bf16"]) <= set(schema["bf16"]) and set(config["fp16"]) <= set(schema["fp16"])  # type: ignore[arg-type]
    # DeepSpeedConfig._batch_assertion: train_batch == micro * grad_acc * world_size (data-parallel size)
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * plan.dp)
    assert not (config["bf16"]["enabled"] and config["fp16"]["enabled"])  # type: ignore[index]
    assert 0 <= config["zero_optimization"]["stage"] <= 3  # type: ignore[index]


def _torchtitan_manager():
    try:
        import torchtitan.models.llama3.config_registry  # noqa: F401  (needs triton)
        from torchtitan.config.manager import ConfigManager
    except ImportError as exc:
        if os.environ.get("PLAIT_REQUIRE_TORCHTITAN"):
            raise
        pytest.skip(f"torchtitan 0.3.0 not importable here ({exc}); CI installs it and runs this test")
    return ConfigManager()


# torchtitan 0.3.0's llama3_405b config swaps in Float8Linear while parsing, which refuses hardware older than
# SM89 (no GPU here), so the 405B export is parsed only on a GPU machine.
TORCHTITAN_MODELS = ["llama3-8b", "llama3-70b"]


@pytest.mark.parametrize("plan", PLANS, ids=[p.describe() for p in PLANS])
@pytest.mark.parametrize("slug", TORCHTITAN_MODELS)
def test_torchtitan_args_parse_with_torchtitan(plan: Plan, slug: str) -> None:
    """Parsed by torchtitan 0.3.0's own ConfigManager (tyro over its config dataclasses)."""
    manager = _torchtitan_manager()
    args, _ = torchtitan_args(plan, slug, get_model(slug))
    config = manager.parse_args(list(args))
    p = config.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree, p.context_parallel_degree) == (plan.tp, plan.pp, plan.cp)
    assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == (plan.dp_replicate, plan.dp_shard)
    assert config.training.global_batch_size == plan.global_batch
    assert config.training.seq_len == (plan.seq_len or get_model(slug).seq_len)
    if plan.pp > 1:
        assert p.pipeline_parallel_microbatch_size == plan.micro_batch
    expected = {"none": "NoneType", "selective": "SelectiveAC.Config", "full": "FullAC.Config"}[plan.recompute]
    assert type(config.activation_checkpoint).__qualname__ == expected
    if plan.precision in ("fp32", "tf32"):  # FSDP2 keeps the parameters in fp32: no bf16 compute copy
        assert config.training.mixed_precision_param == "float32"


def test_torchtitan_artifact_is_a_bash_array() -> None:
    from plait.engine.catalog import get_engine
    from plait.export.torchtitan import torchtitan_artifact
    from plait.hardware.catalog import get_cluster
    from plait.job import Job

    job = Job.build(get_model("llama3-70b"), get_cluster("dgx-h100-ib"), PLANS[1], get_engine("torchtitan"))
    text = torchtitan_artifact(job, "llama3-70b").text
    body = text[text.index("TORCHTITAN_ARGS=(") + len("TORCHTITAN_ARGS=("):text.rindex(")")]
    assert shlex.split(body.replace("\\\n", " "))[:4] == ["--module", "llama3", "--config", "llama3_70b"]


@pytest.mark.parametrize("plan", PLANS, ids=[p.describe() for p in PLANS])
def test_plan_file_round_trip(tmp_path: Path, plan: Plan) -> None:
    path = tmp_path / "plan.toml"
    job = JobSpec(model="llama3-8b", cluster="dgx-h100-ib", gpus=plan.num_gpus)
    write_plan_file(path, plan, job)
    assert read_plan_file(path) == (job, plan)
    with pytest.raises(Exception, match="already exists"):
        write_plan_file(path, replace(plan, micro_batch=plan.micro_batch), job)
