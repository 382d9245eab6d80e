"""Each group of a mixed data split its own micro-batch and recomputation: costed as that group's homogeneous job,
chosen per group as the fastest that fits, written to and read from a plan file, and run by each rank (the
gloo parity test against the uniform run is in this file, slow-marked)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.mixed import group_view
from plait.hardware.mixed_catalog import get_mixed_cluster
from plait.plan.io import JobSpec, plan_to_toml, read_plan_parts
from plait.plan.mixed import GroupShare, MixedPlan, check_mixed_plan, rank_layout, replica_micro_batches, run_refusal
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.predict.mixed import estimate_mixed
from plait.run.uneven import Uneven, check_uneven
from plait.search.mixed_variant import MODES, micro_batches, vary_groups
from plait.workload.catalog import get_model

ROOT = Path(__file__).parents[1]
TINY = ROOT / "examples" / "tiny-model.toml"
MODEL = get_model("gpt3-6.7b")
CLUSTER = get_mixed_cluster("v100-a100-ib")
ENGINE = get_engine("plait")


def _layout(micro_batch: int) -> Plan:
    return Plan(dp_shard=128, sharding="zero2", micro_batch=micro_batch, global_batch=512, precision="fp16",
                seq_len=MODEL.seq_len)


def _split(layout: Plan, v100: GroupShare | None = None, a100: GroupShare | None = None) -> MixedPlan:
    return MixedPlan(plan=layout, split="data", shares=(v100 or GroupShare(group="v100", num_gpus=64, batch=128),
                                                        a100 or GroupShare(group="a100", num_gpus=64, batch=384)))


def _alone(group: str, plan: Plan, local: int):  # type: ignore[no-untyped-def]
    """The group's job built by hand: its devices' view, every one of the 128 replicas at ``local`` sequences."""
    view = group_view(CLUSTER, CLUSTER.group(group), 128)
    return estimate(MODEL, view, replace(plan, global_batch=local * 128), engine=ENGINE)


def test_each_group_is_costed_on_its_own_variant() -> None:
    mixed = _split(_layout(1), GroupShare(group="v100", num_gpus=64, batch=128, recompute="full"),
                   GroupShare(group="a100", num_gpus=64, batch=384, micro_batch=6))
    est = estimate_mixed(MODEL, CLUSTER, mixed, engine=ENGINE)
    v100 = _alone("v100", replace(_layout(1), recompute="full"), 2)
    a100 = _alone("a100", _layout(6), 6)
    assert [g.busy_s for g in est.groups] == [v100.step_time_s, a100.step_time_s]
    assert [g.memory_bytes for g in est.groups] == [v100.memory.total_bytes, a100.memory.total_bytes]
    assert est.step_time_s == max(v100.step_time_s, a100.step_time_s)
    assert "v100 64 GPUs b128 rc-full, a100 64 GPUs b384 mb6" in mixed.describe()


def test_each_group_gets_its_fastest_variant_that_fits() -> None:
    """Uniform micro-batch 2 overflows the 32 GB V100s; each group's pick equals the fastest fitting variant found
    by costing every variant of it as a homogeneous job, and the plan beats the best uniform micro-batch that fits
    (at these batches)."""
    uniform = estimate_mixed(MODEL, CLUSTER, _split(_layout(2)), engine=ENGINE)
    assert not uniform.fits and uniform.groups[1].fits
    varied = vary_groups(MODEL, CLUSTER, uniform, ENGINE, 0, 0.05)
    assert varied is not None and varied.fits
    for group, local, share in (("v100", 2, varied.plan.shares[0]), ("a100", 6, varied.plan.shares[1])):
        costed = [(_alone(group, replace(_layout(mb), recompute=mode), local), mb, mode)
                  for mb in micro_batches(local) for mode in MODES]
        fastest = min((c for c in costed if c[0].memory.total_bytes <= 0.95 * c[0].memory.capacity_bytes),
                      key=lambda c: c[0].step_time_s)
        own = replace(varied.plan.plan, micro_batch=share.micro_batch or varied.plan.plan.micro_batch,
                      recompute=share.recompute or varied.plan.plan.recompute)
        assert (own.micro_batch, own.recompute) == fastest[1:], group
    assert varied.plan.plan.micro_batch == 1 and varied.plan.shares[1].micro_batch == 6  # V100 mb1, A100 mb6
    uniforms = [estimate_mixed(MODEL, CLUSTER, _split(_layout(mb)), engine=ENGINE) for mb in (1, 2)]
    assert varied.tokens_per_s > 1.05 * max(u.tokens_per_s for u in uniforms if u.fits)


def test_a_variant_plan_reads_back_and_is_checked(tmp_path: Path) -> None:
    mixed = _split(_layout(1), a100=GroupShare(group="a100", num_gpus=64, batch=384, micro_batch=6,
                                               recompute="selective"))
    path = tmp_path / "plan.toml"
    path.write_text(plan_to_toml(mixed.plan, JobSpec(cluster="v100-a100-ib", gpus=128), mixed))
    assert read_plan_parts(path)[2] == mixed
    with pytest.raises(ConfigError, match=r"group a100: batch=384 must be a positive multiple of .* = 320"):
        check_mixed_plan(_split(_layout(1), a100=GroupShare(group="a100", num_gpus=64, batch=384, micro_batch=5)),
                         MODEL, CLUSTER)
    pipe = MixedPlan(plan=Plan(pp=2, global_batch=8), split="pipeline",
                     shares=(GroupShare(group="v100", num_gpus=1, layers=(16,), recompute="full"),
                             GroupShare(group="a100", num_gpus=1, layers=(16,))))
    with pytest.raises(ConfigError, match="micro_batch and recompute belong to a data split"):
        check_mixed_plan(pipe, MODEL, CLUSTER)
    tp = MixedPlan(plan=Plan(tp=2, dp_replicate=1, global_batch=8), split="data",
                   shares=(GroupShare(group="v100", num_gpus=2, batch=4, micro_batch=1),
                           GroupShare(group="a100", num_gpus=2, batch=4)))
    assert "tp=2" in (run_refusal(tp) or "")


def test_each_rank_runs_its_groups_variant() -> None:
    layout = Plan(dp_replicate=2, micro_batch=4, global_batch=16)
    mixed = MixedPlan(plan=layout, split="data",
                      shares=(GroupShare(group="v100", num_gpus=1, batch=12, micro_batch=1, recompute="full"),
                              GroupShare(group="a100", num_gpus=1, batch=4)))
    assert rank_layout(layout, mixed, 0) == replace(layout, micro_batch=1, recompute="full")
    assert rank_layout(layout, mixed, 1) == layout
    assert replica_micro_batches(mixed) == (1, 4)
    check_uneven(Uneven(batch_split=(12, 4)), layout, 4, replica_micro_batches(mixed))  # 12 is whole mb1 steps
    with pytest.raises(ConfigError, match=r"--batch-split 6,10: each entry must be a positive multiple of "
                                          r"micro_batch=4"):
        check_uneven(Uneven(batch_split=(6, 10)), layout, 4)
    with pytest.raises(ConfigError, match=r"--batch-split 3,13: .* multiple of its rank's micro-batch \(1,4\)"):
        check_uneven(Uneven(batch_split=(3, 13)), layout, 4, (1, 4))


@pytest.mark.slow
def test_per_group_variants_train_as_the_uniform_run(tmp_path: Path) -> None:
    """2 gloo ranks, tiny model: a mixed plan whose V100 rank takes 10 sequences in micro-batches of 1 with full
    recomputation and whose A100 rank takes 6 in micro-batches of 3 trains as the even uniform run (8 + 8,
    micro-batch 4, no recomputation) within 1e-5 in loss and gradient norm. The layout's micro-batch of 4 divides
    neither rank's rows, so a rank that ignored its group's would average unequal chunks and miss."""
    from tests.inprocess import cli
    from tests.ranks import run_ranks

    layout = Plan(dp_replicate=2, micro_batch=4, global_batch=16)
    mixed = MixedPlan(plan=layout, split="data",
                      shares=(GroupShare(group="v100", num_gpus=1, batch=10, micro_batch=1, recompute="full"),
                              GroupShare(group="a100", num_gpus=1, batch=6, micro_batch=3)))
    (tmp_path / "mixed.toml").write_text(plan_to_toml(layout, JobSpec(model=str(TINY), cluster="v100-a100-ib",
                                                                       gpus=2), mixed))
    (tmp_path / "uniform.toml").write_text(plan_to_toml(layout, JobSpec(model=str(TINY))))
    code, out, err = cli(["run", "--plan", str(tmp_path / "mixed.toml"), "--steps", "3", "--full-precision",
                          "--metrics", str(tmp_path / "mixed.jsonl")])
    assert code == 0, err
    assert "rank 0 = v100" in out + err
    ref = run_ranks(2, ["-m", "plait.run.worker", "--plan", str(tmp_path / "uniform.toml"), "--full-precision",
                        "--steps", "3", "--metrics", str(tmp_path / "uniform.jsonl")], timeout=240)
    assert ref.returncode == 0, ref.stderr[-3000:]
    rows = [[json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
            for name in ("mixed", "uniform")]
    assert len(rows[0]) == len(rows[1]) == 3
    for got, want in zip(*rows, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], abs=1e-5)
