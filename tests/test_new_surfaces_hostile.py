"""Hostile values on the new plan fields and workload files that once escaped as tracebacks or hung: each is now a
``ConfigError`` naming the value and the rule (the CLI's one-line exit 2, swept in ``tests/hostile.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster, resolve_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.search import design
from plait.search.chunks import chunk_verdict
from plait.workload.catalog import resolve_model
from plait.workloads.federated.model import read_federated
from plait.workloads.glm.model import read_glm
from plait.workloads.glm.predict import plan_glm

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("ranks", [0, -1, 2**70])
def test_a_glm_on_no_ranks_or_more_than_the_cluster_has_is_refused(ranks: int) -> None:
    cluster = resolve_cluster("dgx-h100-ib")
    with pytest.raises(ConfigError, match=f"--gpus {ranks} must be between 1 and the {cluster.max_gpus} GPUs"):
        plan_glm(read_glm(EXAMPLES / "glm-tiny.toml"), cluster, ranks)


@pytest.mark.parametrize("old, new, fragment", [
    ("value = 0.5,", "value = 1e300,", "sigma=1e+300 must be in 0..10"),  # exp(sigma z) overflowed
    ("value = 0.5,", "value = nan,", "sigma"),
    ("clients = 100", f"clients = {2**70}", "clients=1180591620717411303424 must be <= 1e+09"),  # m/(m+1) == 1.0
    ("head_lr = 0.1", "head_lr = -1", r"\[run\].head_lr=-1.0 must be a finite step size > 0"),
    ("\nlr = 0.1", "\nlr = inf", r"\[run\].lr=inf must be a finite number"),
    ("participation = 1.0          #", "participation = 0          #", "participation=0.0 must be a fraction"),
])
def test_a_federation_past_what_its_straggler_model_computes_is_refused(tmp_path: Path, old: str, new: str,
                                                                        fragment: str) -> None:
    text = (EXAMPLES / "federated-toy.toml").read_text()
    assert old in text
    (tmp_path / "fed.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace("+", r"\+")):
        read_federated(tmp_path / "fed.toml")


def test_a_huge_design_grid_is_refused_before_any_point_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def built(**_: object) -> None:  # 1.6e9 points were once built (minutes, gigabytes) before the count was checked
        raise AssertionError("a point was built before the grid's size was checked")

    monkeypatch.setattr(design, "Variation", built)
    axes = [(name, tuple(1 + i / 1000 for i in range(200))) for name in ("peak", "hbm_bw", "scale_out_bw", "power")]
    with pytest.raises(ConfigError, match="gives 1600000000 hardware points"):
        design.grid(axes)


def test_chunked_overlap_on_a_tp_grid_is_refused_not_silently_ignored() -> None:
    model, cluster, engine = resolve_model("llama3-70b"), get_cluster("dgx-h100-ib"), get_engine("megatron-core")
    grid_plan = Plan(tp=16, tp_mode="2d", pp=4, micro_batch=4, global_batch=64)
    with pytest.raises(ConfigError, match="not with overlap_chunks=4"):
        estimate(model, cluster, replace(grid_plan, overlap_chunks=4), engine=engine)
    # the planner's chunking verdict skips a grid instead of estimating the refused plan
    assert chunk_verdict(model, cluster, engine, estimate(model, cluster, grid_plan, engine=engine)) is None
