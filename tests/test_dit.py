"""Diffusion-transformer inference: model sizes against the published ones, the plans' arithmetic by its
invariants, one-line refusals, and plait estimate and plan on a DiT TOML."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.validate.datasets import dataset_path
from plait.workloads.dit.cost import DISTRIFUSION_WARMUP, DitPlan, estimate_dit
from plait.workloads.dit.model import ACT_BYTES, read_dit
from tests.inprocess import cli as _cli

ROOT = Path(__file__).resolve().parents[1]
DIT = ROOT / "examples" / "dit-xl-2-1024px.toml"
H100 = get_cluster("dgx-h100-ib")


@pytest.mark.parametrize("example, published, rel", [
    ("dit-xl-2-1024px", 675e6, 0.01),     # Peebles & Xie, ICCV 2023, Sec. 4 ("DiT-XL/2 ... 675M parameters")
    ("pixart-alpha-1024px", 0.6e9, 0.01),  # Chen et al., ICLR 2024, abstract ("0.6B parameters")
    ("flux-1-dev-1024px", 12e9, 0.02),     # Black Forest Labs' announcement ("12 billion parameter")
])
def test_block_parameters_match_the_published_sizes(example: str, published: float, rel: float) -> None:
    """The blocks alone (embedders and final layer left out) within 1-2% of each model's published size."""
    spec, job = read_dit(ROOT / "examples" / f"{example}.toml")
    assert spec.params() == pytest.approx(published, rel=rel)
    assert job.image_tokens(spec) == (1024 // 8 // 2) ** 2  # 64 x 64 patches of a 128 x 128 latent


def test_cfg_parallel_halves_each_gpus_work() -> None:
    spec, job = read_dit(DIT)
    one, two = estimate_dit(spec, job, DitPlan(), H100), estimate_dit(spec, job, DitPlan(cfg=2), H100)
    assert two.compute_s == pytest.approx(one.compute_s / 2)
    assert 0 < two.comm_s < 0.01 * two.step_s  # one small all-gather of the predicted noise


def test_ulysses_and_ring_split_the_same_work_and_only_ulysses_waits_for_its_all_to_all() -> None:
    """Both split the sequence 4 ways (the same FLOPs); Ulysses' all-to-alls are not overlapped, the ring's K/V
    passes hide behind the blockwise attention until they outgrow it."""
    spec, job = read_dit(DIT)
    ulysses, ring = (estimate_dit(spec, job, DitPlan(**{k: 4}), H100) for k in ("ulysses", "ring"))
    assert ulysses.compute_s == pytest.approx(ring.compute_s)
    assert ulysses.comm_s > 0
    slow = replace(H100, tiers=tuple(replace(t, bandwidth_gb_per_s_per_gpu=t.bandwidth_gb_per_s_per_gpu / 100)
                                     for t in H100.tiers))
    assert estimate_dit(spec, job, DitPlan(ring=4), slow).comm_s > ring.comm_s


def test_stale_plans_pay_their_warm_up_and_fill_and_keep_k_v_buffers() -> None:
    spec, job = read_dit(DIT)
    distri = estimate_dit(spec, job, DitPlan(distrifusion=4), H100)
    assert distri.latency_s >= job.steps * distri.step_s  # warm-up steps run synchronously
    passes, seq = job.passes, job.image_tokens(spec)
    assert distri.buffer_bytes == pytest.approx(2 * seq * spec.hidden * ACT_BYTES * passes * spec.layers)
    pipe = estimate_dit(spec, job, DitPlan(pipefusion=4, patches=8), H100)
    assert pipe.weight_bytes == pytest.approx(spec.params() * ACT_BYTES / 4)
    assert pipe.buffer_bytes == pytest.approx(2 * seq * spec.hidden * ACT_BYTES * passes * spec.layers / 4)
    assert pipe.latency_s == pytest.approx(job.steps * pipe.step_s + 3 / 8 * pipe.compute_s)
    assert DISTRIFUSION_WARMUP < job.steps


@pytest.mark.parametrize("plan, rule", [
    (DitPlan(ulysses=3), "ulysses x tp = 3 must divide heads=16"),
    (DitPlan(pipefusion=8, patches=8), "pipefusion=8 must divide the 28 layers"),
    (DitPlan(pipefusion=2, patches=1), "patches=1 must be >= pipefusion=2"),
    (DitPlan(distrifusion=2, ulysses=2), "distrifusion combines with cfg only"),
    (DitPlan(cfg=3), "cfg=3 must be 1, or 2 with classifier-free guidance on"),
])
def test_impossible_plans_are_refused_in_one_line(plan: DitPlan, rule: str) -> None:
    spec, job = read_dit(DIT)
    with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
        estimate_dit(spec, job, plan, H100)
    assert "\n" not in str(caught.value)


def test_bad_dit_files_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_text('[dit]\nhidden = 1000\nlayers = 2\nheads = 16\n[job]\nresolution = 1000\n')
    with pytest.raises(ConfigError, match=re.escape("heads=16 must divide hidden=1000")):
        read_dit(path)
    path.write_text('[dit]\nhidden = 1024\nlayers = 2\nheads = 16\n[job]\nresolution = 1000\n')
    with pytest.raises(ConfigError, match=re.escape("resolution=1000 must be a positive multiple of vae_downsample x patch = 16")):
        read_dit(path)


def test_plait_plan_picks_the_lowest_latency_that_fits() -> None:
    code, out, _ = _cli(["plan", "--model", str(DIT), "--gpus", "8", "--json"])
    assert code == 0
    result = json.loads(out)
    latencies = [r["end_to_end_s"] for r in result["ranked"]]
    assert latencies == sorted(latencies) and len(latencies) > 10
    assert all(r["gpus"] == 8 for r in result["ranked"])
    assert all(r["memory_bytes"] <= 0.95 * H100.accelerator.memory_bytes for r in result["ranked"])
    code, out, _ = _cli(["estimate", "--model", str(DIT), "--gpus", "8", "--parallel", "cfg=2,ulysses=4", "--json"])
    single = json.loads(out)
    assert single["plan"]["cfg"] == 2 and single["plan"]["ulysses"] == 4
    assert single["end_to_end_s"] >= latencies[0]  # the search finds this plan or a faster one


@pytest.mark.parametrize("argv, rule", [
    (["estimate", "--model", str(DIT), "--parallel", "sp=2"], "parallel 'sp=2' must read KEY=N"),
    (["estimate", "--model", str(DIT), "--parallel", "ulysses=two"], "'two' must be a whole number"),
    (["estimate", "--model", "llama3-8b", "--parallel", "ulysses=2"], "pass --model with a DiT TOML"),
])
def test_bad_dit_options_are_one_line(argv: list[str], rule: str) -> None:
    code, _, err = _cli(argv)
    assert code != 0 and rule in err and "Traceback" not in err


def test_the_published_flux_latencies_are_predicted_with_their_errors() -> None:
    """xDiT's FLUX.1-dev table on H100 (plait/validate/data/dit_latency.csv), end to end (text encoders, denoising
    with the host's launches and eager dispatch, VAE decode): the torch.compile rows within 15% on average; the eager
    rows within 30% (each within 15% on average: tests/test_dit_end_to_end.py)."""
    from plait.validate.classic import mape
    from plait.workloads.dit.validate import validate_dit

    results = validate_dit(dataset_path("dit"))
    flux = [r for r in results if r.source == "XDIT_DOC_FLUX_H100"]
    assert len(flux) == 12 and all(r.error_pct is not None for r in flux)
    compiled = [r for r in flux if "compile=yes" in r.label]
    assert len(compiled) == 6 and mape(compiled) < 15.0
    assert mape([r for r in flux if "compile=no" in r.label]) < 30.0
    assert all(r.why_not for r in results if r.error_pct is None)


@pytest.mark.parametrize("plan", [DitPlan(pipefusion=4, patches=4), DitPlan(cfg=2, pipefusion=4, patches=8),
                                  DitPlan(pipefusion=2, patches=8), DitPlan(distrifusion=4), DitPlan(ulysses=4)])
def test_the_simulated_generation_agrees_with_the_closed_form(plan: DitPlan) -> None:
    """PipeFusion patch by patch on the event kernel (the first stage waiting for the last stage's patch of the
    previous step) against the closed form's steps plus one fill of (p - 1) / M of a step: within 1% on H100, where
    the patches' transfers hide behind compute; the other plans step by step."""
    from plait.workloads.dit.simulate import dit_timeline

    spec, job = read_dit(DIT)
    est = estimate_dit(spec, job, plan, H100)
    timeline = dit_timeline(job, plan, est)
    assert timeline.step_time_s == pytest.approx(est.latency_s, rel=0.01)
    lanes = {s.rank for s in timeline.spans}
    assert len(lanes) == plan.pipefusion
    if plan.pipefusion > 1:  # every stage ran every patch of every step
        assert len(timeline.spans) == plan.pipefusion * plan.patches * job.steps


def test_plait_simulate_takes_dit_and_gnn_files(tmp_path: Path) -> None:
    code, out, _ = _cli(["simulate", "--model", str(DIT), "--parallel", "pipefusion=4,patches=8", "--json",
                         "--trace", str(tmp_path / "t.json")])
    assert code == 0
    doc = json.loads(out)
    assert doc["simulated_s"] == pytest.approx(doc["closed_form_s"], rel=0.01) and doc["lanes"] == 4
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    gnn = ROOT / "examples" / "graphsage-ogbn-products.toml"
    code, out, _ = _cli(["simulate", "--model", str(gnn), "--gpus", "2", "--global-batch", "2048", "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["lanes"] == 2 and doc["simulated_s"] == pytest.approx(doc["closed_form_s"])


def test_offloaded_weights_stream_over_pcie_and_share_it_where_the_gpus_have_no_nvlink() -> None:
    """ChunkFlow's first-order model: a step is at least the weights' stream over PCIe, two layers stay resident;
    on GPUs that talk over PCIe (L40S) the collectives share the link, with NVLink they do not."""
    from plait.hardware.catalog import get_accelerator
    from plait.workloads.dit.offload import offloaded_step_s, pcie_carries_collectives

    spec, job = read_dit(ROOT / "examples" / "flux-1-dev-1024px.toml")
    plain, off = (estimate_dit(spec, job, DitPlan(offload=k), H100) for k in (0, 1))
    stream = spec.params() * ACT_BYTES / (H100.accelerator.pcie_bandwidth_gb_per_s * 1e9)
    assert off.step_s == pytest.approx(max(plain.compute_s, stream))
    assert off.weight_bytes == pytest.approx(2 * spec.params() * ACT_BYTES / spec.attention_layers)
    l40s = replace(H100, accelerator=get_accelerator("l40s"))
    assert pcie_carries_collectives(l40s) and not pcie_carries_collectives(H100)
    assert offloaded_step_s(1.0, 0.5, 64e9, l40s) == pytest.approx(64e9 / 32e9 + 0.5)  # stream and collectives add
    assert offloaded_step_s(1.0, 0.5, 16e9, H100) == pytest.approx(max(1.0, 16e9 / 64e9) + 0.5)
    with pytest.raises(ConfigError, match="without stale activations"):
        estimate_dit(spec, job, DitPlan(distrifusion=2, offload=1), H100)
