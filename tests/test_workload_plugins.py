"""Workload kinds are plug-ins: a toy kind defined in the tests folder registers itself and is estimated, planned
and simulated through the command line's own entry (:func:`plait.cli.main.run_cli`), without touching plait's core;
and every shipped example resolves to the kind that prices it."""

from __future__ import annotations

import dataclasses
import json
import re
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
    "dlrm-small.toml": "dlrm", "dlrm-tiny.toml": "dlrm", "dlrm-cat.toml": "dlrm", "wide-deep-tiny.toml": "dlrm",
    "dlrm-criteo-fl15.toml": "dlrm", "dlrm-criteo-fl3.toml": "dlrm",
    "gnn-tiny.toml": "gnn", "graphsage-ogbn-products.toml": "gnn",
    "dit-tiny.toml": "dit", "dit-xl-2-1024px.toml": "dit", "flux-1-dev-1024px.toml": "dit",
    "pixart-alpha-1024px.toml": "dit", "sana-1600m-4k.toml": "dit", "hunyuanvideo-720p.toml": "dit",
    "consisid-480p.toml": "dit", "cogvideox-5b-480p.toml": "dit", "mochi-1-480p.toml": "dit",
    "glm-tiny.toml": "glm", "glm-criteo-sparse.toml": "glm", "glm-dense-svm.toml": "glm",
    "small-model.toml": "transformer", "tiny-model.toml": "transformer", "tiny-moe.toml": "transformer",
    "llama3-70b-pp.toml": "transformer", "llama3-8b-fsdp.toml": "transformer", "tiny-plan.toml": "transformer",
    "llama3-70b-chunks.toml": "transformer", "llama3-70b-tp2d.toml": "transformer", "per-stage-plan.toml": "transformer",
    "cpu-node.toml": "transformer", "mixed-gpu-cpu.toml": "transformer", "my-cluster.yaml": "transformer",
    "small-cnn-plan.toml": "transformer", "mixed-plan.toml": "transformer", "crossbow-plan.toml": "transformer",
    "federated-toy.toml": "federated",
    "mixed-two-sites.toml": "transformer", "tiny-moe-ep2-chunks.toml": "transformer", "tiny-tp2-chunks.toml": "transformer",
    "tiny-tp2d.toml": "transformer", "small-mlp-tp2-plan.toml": "transformer", "small-mlp-tp2-dp2-plan.toml": "transformer",
    "async-ps-plan.toml": "transformer", "easgd-plan.toml": "transformer",
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
    assert code == 2 and "plait run takes a DLRM, GNN, DiT, federated job or GLM TOML as --model" in err


def test_shipped_kinds_stay_registered() -> None:
    with pytest.raises(ConfigError, match="stays registered"):
        unregister("gnn")
    assert get_kind("gnn").label == "GNN"


GNN = "[graph]\nnodes = 10\nedges = 20\nfeatures = 4\nclasses = 2\n[model]\nlayers = 1\nhidden = 8\nfanouts = [5]\n"
DIT = "[dit]\nhidden = 1024\nlayers = 2\nheads = 16\n"
DLRM = 'dense_features = 13\nbottom_mlp = [4]\ntop_mlp = [1]\n[[tables]]\nname = "t"\nrows = 10\ndim = 4\n'


@pytest.mark.parametrize("text, rule", [
    (GNN + "fanout = 3\n", "[model]: unknown key 'fanout'"),
    (GNN.replace("layers = 1", 'layers = "1"'), "[model].layers='1' must be an integer"),
    (GNN + "[extra]\n", "unknown key 'extra' (known: graph, loop, model, name)"),
    (GNN + '[loop]\ncopy_from = "mmap"\n', "[loop].copy_from='mmap' must be one of"),
    (GNN + '[loop]\nloader = "salient"\nfeature_bytes = 3\n', "feature_bytes=3 must be one of 1, 2, 4, 8"),
    (GNN.replace("classes = 2\n", "classes = 2\ndegree = 3\n"), "[graph]: unknown key 'degree'"),
    (DIT + "hiden = 3\n", "[dit]: unknown key 'hiden'"),
    (DIT + "[job]\ncfg = 1\n", "[job].cfg=1 must be true or false"),
    ("name = 3\n" + DIT, "name=3 must be a string"),
    (DIT.replace("heads = 16\n", ""), "[dit]: missing required key 'heads'"),
    (DLRM + "poolin = 1.0\n", "tables[0]: unknown key 'poolin'"),
    ("extra = 1\n" + DLRM, "unknown key 'extra'"),
    (DLRM.replace("rows = 10", "rows = 1.5"), "tables[0].rows=1.5 must be an integer"),
    (DLRM.replace("bottom_mlp = [4]", "bottom_mlp = []"), "and bottom_mlp too with interaction \"dot\""),
])
def test_the_workload_readers_are_strict(tmp_path: Path, text: str, rule: str) -> None:
    """Unknown keys, wrong types and missing keys are one-line errors naming the key (plait.schema)."""
    path = tmp_path / "w.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
        load(str(path)).description
    assert "\n" not in str(caught.value)


def test_the_readers_defaults_are_the_descriptions_own() -> None:
    """A file that states only the required keys takes the dataclasses' field defaults (one place)."""
    from plait.workloads.dit.model import DitJob, DitSpec
    from plait.workloads.gnn.model import GnnModel, GraphStats

    dit = {f.name: f.default for f in dataclasses.fields(DitSpec) if f.default is not dataclasses.MISSING}
    assert dit == {"kind": "dit", "mlp_ratio": 4.0, "patch": 2, "latent_channels": 4, "vae_downsample": 8,
                   "text_tokens": 0, "single_layers": 0, "hf_model": "", "mlp": "plain", "vae_temporal": 1,
                   "text_encoders": (), "vae": "", "eager_kernels": 0, "eager_kernels_single": 0,
                   "step_extra_kernels": 0, "side_attention_every": 0, "side_attention_width": 0, "rotary_fp32": "none"}
    assert DitJob() == DitJob(resolution=1024, steps=50, batch=1, cfg=True, height=0, frames=1, compiled=False,
                              cache_skip=0.0, vae_tile_px=0, vae_tile_stride_px=0, output="pil")
    assert {f.name for f in dataclasses.fields(GraphStats) if f.default is not dataclasses.MISSING} == {
        "degree_exponent", "out_degree_exponent", "degree_histogram"}  # 0.0: an undirected graph; (): no histogram
    assert {f.name for f in dataclasses.fields(GnnModel) if f.default is not dataclasses.MISSING} == {"kind", "heads",
                                                                                                     "dropout",
                                                                                                     "batch_norm",
                                                                                                     "batch_norm_kernels"}
