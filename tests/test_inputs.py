"""Loading models from config.json, clusters from TOML/YAML, and the provenance of every figure."""

from __future__ import annotations

import json
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import accelerator_names, cluster_names, get_accelerator, get_cluster, load_cluster_file
from plait.plan.plan import Plan
from plait.plan.rules import check_plan
from plait.validate.datasets import dataset_path
from plait.workload.catalog import get_model, resolve_model
from tests.conftest import toy_cluster_mapping

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
}
MIXTRAL_CONFIG = {
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False,
}


def test_hf_config_matches_catalog(tmp_path: Path) -> None:
    path = tmp_path / "Meta-Llama-3-8B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA3_8B_CONFIG))
    model = resolve_model(str(path))
    assert model.name == "Meta-Llama-3-8B"
    assert model.total_params() == get_model("llama3-8b").total_params() == 8_030_261_248


def test_hf_moe_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL_CONFIG))
    model = resolve_model(str(path))
    assert model.moe is not None and model.moe.num_experts == 8 and model.moe.top_k == 2
    assert model.total_params() == 46_702_792_704


def test_bad_hf_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        resolve_model(str(path))
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ConfigError, match="lacks"):
        resolve_model(str(path))


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_user_cluster_files(tmp_path: Path, suffix: str) -> None:
    raw = toy_cluster_mapping()
    raw["accelerator"] = "h100-sxm-80gb"
    path = tmp_path / f"cluster{suffix}"
    if suffix == ".yaml":
        path.write_text(yaml.safe_dump(raw))
    else:
        import tomli_w

        path.write_text(tomli_w.dumps(raw))
    cluster = load_cluster_file(path)
    assert cluster.accelerator == get_accelerator("h100-sxm-80gb") and cluster.tiers[1].span_gpus == 1024


def test_bad_cluster_files(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="is not valid"):
        load_cluster_file(path)
    raw = toy_cluster_mapping()
    raw["tiers"][0]["bandwidth_gb_per_s_per_gpu"] = -1.0
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="bandwidth must be > 0"):
        load_cluster_file(path)
    raw = toy_cluster_mapping()
    del raw["tiers"][0]["efficiency"]["source"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="missing required key 'source'"):
        load_cluster_file(path)


def test_presets_cover_the_dataset_systems() -> None:
    import csv

    with open(dataset_path("dev"), newline="") as handle:
        systems = {row["system"] for row in csv.DictReader(handle)} - {""}
    assert systems <= set(cluster_names())
    assert {"dgx-a100-ib", "a100-roce-1600", "a100-omnipath", "dgx-h100-ib", "h100-roce-400", "h100-grandteton-roce",
            "h100-mosaic", "gb200-nvl72", "gb300-nvl72", "b200-dgx", "megascale-ampere"} <= set(cluster_names())


@pytest.mark.parametrize("slug", accelerator_names())
def test_every_accelerator_figure_has_a_source(slug: str) -> None:
    acc = get_accelerator(slug)
    assert acc.source.strip()
    for f in fields(acc.efficiency):
        figure = getattr(acc.efficiency, f.name)
        if figure is None:  # an optional curve left out: the estimator reads the sourced one its docstring names
            optional = ("matmul_bf16_wgrad", "matmul_fp32", "conv3x3_fp32")
            assert f.name in optional and acc.efficiency.matmul_bf16.source.strip()
            continue
        assert figure.source.strip() and figure.value >= 0


@pytest.mark.parametrize("slug", cluster_names())
def test_every_tier_has_a_source(slug: str) -> None:
    cluster = get_cluster(slug)
    assert cluster.source and cluster.price_source
    for tier in cluster.tiers:
        assert tier.source and tier.efficiency.source and 0 < tier.efficiency.peak <= 1


def test_required_catalog_entries() -> None:
    text = (Path(__file__).parents[1] / "src/plait/workload/data/models.toml").read_bytes()
    slugs = set(tomllib.loads(text.decode()))
    for slug in ("gpt3-175b", "mpt-70b", "llama2-70b", "llama3.1-405b", "mixtral-8x22b", "deepseek-v3", "qwen3-8b",
                 "qwen3-235b-a22b", "nemotron4-340b", "bloom-176b", "opt-175b", "megatron-gpt-1008b"):
        assert slug in slugs
    for slug in ("a100-40gb", "a100-80gb", "h100-sxm-80gb", "h100-94gb", "h100-96gb", "h200", "b200", "gb200", "gb300",
                 "mi300x", "l40s", "v100"):
        assert slug in accelerator_names()


@pytest.mark.parametrize("plan,fragment", [
    (Plan(tp=3, global_batch=8), "tp=3 must divide num_heads=32"),
    (Plan(pp=64, global_batch=8), "pp*vpp=64 must be <= num_layers=32"),
    (Plan(dp_replicate=8, global_batch=12), "global_batch=12 must be divisible by micro_batch*dp"),
    (Plan(cp=3, global_batch=8), "must be divisible by 2*cp=6"),
    (Plan(ep=2, dp_replicate=2, global_batch=8), "ep=2 needs a mixture-of-experts model"),
    (Plan(dp_shard=4, global_batch=8), "needs sharding zero1/zero2/zero3"),
    (Plan(vpp=2, pp=2, global_batch=8), "vpp=2 needs schedule='interleaved'"),
    (Plan(micro_batch=0, global_batch=8), "micro_batch=0 must be > 0"),
])
def test_plan_rules_name_value_and_rule(plan: Plan, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("*", r"\*").replace("(", r"\(")):
        check_plan(plan.with_seq_len(8192), get_model("llama3-8b"), get_cluster("dgx-h100-ib"))


def test_the_documented_cluster_file_loads_and_its_storage_figure_is_used() -> None:
    """examples/my-cluster.yaml (every key, commented) loads, and its checkpoint-store bandwidth sets goodput's
    checkpoint time."""
    from plait.predict.estimate import estimate
    from plait.predict.goodput import goodput

    cluster = load_cluster_file(Path(__file__).resolve().parents[1] / "examples" / "my-cluster.yaml")
    assert cluster.storage_bytes_per_s_per_gpu == 0.5e9 and cluster.max_gpus == 128
    est = estimate(get_model("llama3-8b"), cluster, Plan(dp_shard=64, sharding="zero3", global_batch=512),
                   engine=get_engine())
    failures = goodput(est)
    assert failures.checkpoint_s == pytest.approx(failures.checkpoint_bytes_per_gpu / 0.5e9)


def test_every_problem_in_a_cluster_file_is_reported_at_once(tmp_path: Path) -> None:
    """Unknown, missing and mistyped keys and non-finite numbers, nested ones included, in one line (before:
    one at a time, and NaN bandwidth gave "Step time nan s ... fits")."""
    raw = toy_cluster_mapping()
    raw["colour"] = "blue"
    del raw["price_source"]
    raw["gpus_per_node"] = 8.5
    raw["tiers"][1]["bandwidth_gb_per_s_per_gpu"] = float("nan")
    raw["accelerator"]["memory_gib"] = float("inf")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as caught:
        load_cluster_file(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("5 problems")
    for part in ("unknown key 'colour'", "missing required key 'price_source'", "gpus_per_node=8.5 must be an integer",
                 "tiers[1].bandwidth_gb_per_s_per_gpu=nan must be a finite number", "memory_gib=inf must be a finite"):
        assert part in message
