"""Workload kinds are plug-ins: a toy kind defined in the tests folder registers itself and is estimated, planned
and simulated through the command line's own entry (:func:`plait.cli.main.run_cli`), without touching plait's core;
and every shipped example resolves to the kind that prices it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.workloads import get_kind, kind_of, kinds, load, register, unregister
from tests import toy_workload
from tests.inprocess import cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
KINDS = {
    "dlrm-small.toml": "dlrm", "dlrm-tiny.toml": "dlrm",
    "gnn-tiny.toml": "gnn", "graphsage-ogbn-products.toml": "gnn",
    "dit-tiny.toml": "dit", "dit-xl-2-1024px.toml": "dit", "flux-1-dev-1024px.toml": "dit",
    "pixart-alpha-1024px.toml": "dit",
    "small-model.toml": "transformer", "tiny-model.toml": "transformer", "tiny-moe.toml": "transformer",
    "llama3-70b-pp.toml": "transformer", "llama3-8b-fsdp.toml": "transformer", "tiny-plan.toml": "transformer",
    "cpu-node.toml": "transformer", "mixed-gpu-cpu.toml": "transformer", "my-cluster.yaml": "transformer",
}
"""Each shipped example and the kind that recognises it (plan, cluster and model TOMLs are the core's)."""


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Path]:
    """The toy kind registered (and removed afterwards), and a file that describes a toy workload."""
    register(toy_workload.KIND)
    path = tmp_path / "toy.toml"
    path.write_text('[toy]\nname = "toy"\nflops_per_sample = 1e12\n')
    try:
        yield path
    finally:
        unregister("toy")


def test_every_shipped_example_resolves_to_its_kind() -> None:
    shipped = {p.name for p in EXAMPLES.iterdir() if p.suffix in (".toml", ".yaml")}
    assert shipped == set(KINDS), "a new example needs its kind in KINDS"
    for name, kind in KINDS.items():
        assert kind_of(str(EXAMPLES / name)).name == kind, name
    assert kind_of("plait.workload.zoo:resnet50").name == "traced"
    assert kind_of("llama3-8b").name == kind_of(None).name == "transformer"


def test_each_kinds_description_is_typed() -> None:
    spec, job = load(str(EXAMPLES / "dit-tiny.toml")).description
    assert (spec.name, job.steps) == ("dit-tiny", job.steps) and type(spec).__name__ == "DitSpec"
    assert type(load(str(EXAMPLES / "gnn-tiny.toml")).description).__name__ == "GnnSpec"
    assert type(load(str(EXAMPLES / "dlrm-tiny.toml")).description).__name__ == "DlrmSpec"
    assert type(load("llama3-8b").description).__name__ == "ModelSpec"


def test_the_toy_kind_is_recognised_before_the_core(toy: Path) -> None:
    assert kind_of(str(toy)) is toy_workload.KIND
    assert [k.name for k in kinds()][-1] == "transformer"
    with pytest.raises(ConfigError, match="already registered"):
        register(toy_workload.KIND)


def test_the_toy_kind_estimates_through_the_cli(toy: Path) -> None:
    code, out, err = cli(["estimate", "--model", str(toy), "--gpus", "4", "--global-batch", "8", "--json"])
    assert code == 0, err
    peak = resolve_cluster("dgx-h100-ib").accelerator.peak_flops("bf16")
    assert json.loads(out) == {"model": "toy", "gpus": 4, "step_time_s": pytest.approx(2 * 1e12 / peak)}


def test_the_toy_kind_plans_through_the_cli(toy: Path) -> None:
    code, out, err = cli(["plan", "--model", str(toy), "--gpus", "4", "--global-batch", "8", "--json"])
    assert code == 0, err
    assert [r["gpus"] for r in json.loads(out)["ranked"]] == [4, 2, 1]


def test_the_toy_kind_simulates_through_the_cli(toy: Path) -> None:
    code, out, err = cli(["simulate", "--model", str(toy), "--gpus", "2", "--global-batch", "8", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["simulated_s"] == doc["closed_form_s"] and doc["lanes"] == 2 and doc["spans"] == 2


def test_the_toy_kinds_strict_reader_refuses_unknown_keys(toy: Path) -> None:
    toy.write_text('[toy]\nname = "toy"\nflops_per_sample = 1e12\nflop = 1\n')
    code, _, err = cli(["estimate", "--model", str(toy), "--json"])
    assert code == 2 and "unknown key 'flop'" in err


def test_a_kind_without_a_run_entry_is_refused_by_plait_run(toy: Path) -> None:
    code, _, err = cli(["run", "--model", str(toy)])
    assert code == 2 and "plait run takes a DLRM, GNN or DiT TOML as --model" in err


def test_shipped_kinds_stay_registered() -> None:
    with pytest.raises(ConfigError, match="stays registered"):
        unregister("gnn")
    assert get_kind("gnn").label == "GNN"
