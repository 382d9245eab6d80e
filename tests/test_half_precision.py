"""The 16-bit precision a device has: Volta, Turing, Pascal and Kepler have no bf16 arithmetic (NVIDIA's V100, T4,
P100 and K80 datasheets list fp16 and fp32 only), so a plan's bf16 runs there as fp16, is said so, is what the
planner ranks and what a mixed cluster's group of such devices computes in beside bf16 groups."""

from __future__ import annotations

import json

import pytest

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_accelerator, get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.inprocess import cli


@pytest.mark.parametrize("accelerator", ["v100", "t4", "p100", "k80"])
def test_a_device_without_bf16_runs_a_16_bit_plan_in_fp16(accelerator: str) -> None:
    acc = get_accelerator(accelerator)
    assert acc.arithmetic("bf16") == "fp16" and acc.arithmetic("fp16") == "fp16"
    assert acc.arithmetic("fp32") == "fp32"


def test_a_device_with_both_keeps_the_plans_precision() -> None:
    acc = get_accelerator("a100-80gb")
    assert (acc.arithmetic("bf16"), acc.arithmetic("fp16")) == ("bf16", "fp16")


def test_a_bf16_estimate_on_v100_is_an_fp16_one_and_says_so() -> None:
    model, engine = get_model("gpt3-1.3b"), get_engine()
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64)
    asked = estimate(model, get_cluster("dgx1-v100"), plan, engine=engine)
    fp16 = estimate(model, get_cluster("dgx1-v100"), Plan(dp_shard=8, sharding="zero3", global_batch=64,
                                                          precision="fp16"), engine=engine)
    assert asked.plan.precision == "fp16" and asked.step_time_s == fp16.step_time_s
    code, out, _ = cli(["estimate", "--cluster", "dgx1-v100", "--model", "gpt3-1.3b", "--gpus", "8"])
    assert code == 0 and "precision bf16 runs as fp16" in out and "fp16 dense peak" in out
    code, out, _ = cli(["estimate", "--cluster", "dgx-a100-ib", "--model", "gpt3-1.3b", "--gpus", "8"])
    assert code == 0 and "runs as" not in out and "bf16 dense peak" in out


def test_the_planner_ranks_fp16_plans_on_v100_and_bf16_on_a100() -> None:
    for cluster, want in (("dgx1-v100", "fp16"), ("dgx-a100-ib", "bf16")):
        code, out, err = cli(["plan", "--cluster", cluster, "--model", "gpt3-125m", "--gpus", "4", "--global-batch",
                              "16", "--top", "3", "--json"])
        assert code == 0, err
        plans = json.loads(out)["top"]
        assert plans and {p["plan"]["precision"] for p in plans} == {want}


def test_a_mixed_clusters_volta_group_computes_in_fp16_beside_bf16() -> None:
    code, out, err = cli(["estimate", "--cluster", "v100-a100-ib", "--model", "gpt3-1.3b", "--global-batch", "128",
                          "--json"])
    assert code == 0, err
    groups = {g["group"]: g["precision"] for g in json.loads(out)["groups"]}
    assert groups == {"v100": "fp16", "a100": "bf16"}
    code, out, _ = cli(["estimate", "--cluster", "v100-a100-ib", "--model", "gpt3-1.3b", "--global-batch", "128"])
    assert code == 0 and "V100 SXM2 32GB (in fp16: no bf16)" in out and "A100 SXM4 80GB (in" not in out
