"""How the validators read the GPU and model names of rows other tables wrote: a GPU named without its system runs on
a generic server of the packaged part, in every validator; a DiT model may be named as its repository names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_accelerator, get_cluster
from plait.hardware.server import SERVER_GPUS, accelerator_slug, gpu_server, server_problem
from plait.validate.datasets import dataset_path
from plait.validate.runs import read_runs
from plait.validate.translate import row_cluster
from plait.workloads.dit.validate import model_file, validate_dit
from plait.workloads.dlrm.validate import validate_dlrm
from plait.workloads.gnn.validate import validate_gnn
from plait.workloads.traced.validate import validate_classic


@pytest.mark.parametrize(("name", "slug"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),  # nvidia-smi's name of the SXM part
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("A100", "a100-80gb"),  # a family alone: its reference system's part
    ("Tesla V100-SXM2-16GB", "v100"),
    ("V100-SXM3-32GB-H", "v100"),
    ("Tesla V100 PCIe 32GB", "v100-pcie"),
    ("Tesla P100", "p100"),
    ("GeForce RTX 3090", "rtx3090"),
    ("L20", "l20"),
    ("L40S PCIe", "l40s"),  # a PCIe card named with its form factor
    ("NVIDIA A10G", "a10g"),
    ("H800", "h800"),
    ("AMD Instinct MI250X", "mi250x"),
])
def test_a_gpu_as_tables_write_it_is_the_packaged_part(name: str, slug: str) -> None:
    assert accelerator_slug(name) == slug


@pytest.mark.parametrize("name", ["H100 PCIe", "GeForce RTX 4090", "Gaudi2", ""])
def test_a_gpu_the_catalog_lacks_is_not_guessed(name: str) -> None:
    """The H100 PCIe card is neither the SXM part nor the NVL card: no part stands in for it."""
    assert accelerator_slug(name) is None
    assert server_problem(name, 1) is not None


def test_the_generic_server_joins_its_gpus_by_the_parts_own_link() -> None:
    nvlink, pcie = gpu_server("H800", 8), gpu_server("L20", 4)
    assert nvlink.gpus_per_node == pcie.gpus_per_node == SERVER_GPUS
    assert (nvlink.tiers[0].name, nvlink.tiers[0].bandwidth_gb_per_s_per_gpu) == ("nvlink", 200.0)
    assert (pcie.tiers[0].name, pcie.tiers[0].bandwidth_gb_per_s_per_gpu) == ("pcie", 32.0)
    assert nvlink.accelerator == get_accelerator("h800")


def test_the_memory_a_name_states_replaces_the_parts_where_no_variant_has_it() -> None:
    assert gpu_server("Tesla V100-SXM2-16GB", 1).accelerator.memory_gib == 16.0
    assert gpu_server("A100-SXM4-40GB", 1).accelerator.memory_gib == 40.0


def test_a_generic_server_spanning_servers_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="16 GPUs span servers"):
        gpu_server("L20", 16)
    assert "span servers" in server_problem("L20", 16)


def _renamed(kind: str, tmp_path: Path, pick: str, old: str, new: str) -> tuple[Path, Path]:
    """The shipped rows of ``kind`` whose line holds ``pick``, as they are and with the GPU ``old`` named ``new``."""
    lines = dataset_path(kind).read_text().splitlines()
    rows = [line for line in lines[1:] if pick in line and old in line]
    assert rows
    before, after = tmp_path / "before.csv", tmp_path / "after.csv"
    before.write_text("\n".join([lines[0], *rows]) + "\n")
    after.write_text("\n".join([lines[0], *(r.replace(old, new) for r in rows)]) + "\n")
    return before, after


def test_one_gpu_rows_on_a_generic_server_predict_as_on_their_preset(tmp_path: Path) -> None:
    """On one GPU no link is crossed, so a row whose GPU is named as nvidia-smi names it (no preset stands for that
    name) predicts what the same row on its preset system does, and its label says it ran as a generic server."""
    cases = [(validate_dlrm, "dlrm", "DLE_PYT_DLRM_2110", ",V100-SXM3-32GB,1,", ",Tesla V100-SXM3-32GB,1,"),
             (validate_dit, "dit", "XDIT_DOC_FLUX_H100", ",H100,1,", ",NVIDIA H100 80GB HBM3,1,"),
             (validate_classic, "classic", "DLE_MX_RN50", ",V100-SXM2-16GB,1,", ",Tesla V100-SXM2-16GB,1,")]
    for validate, kind, pick, old, new in cases:
        before, after = _renamed(kind, tmp_path, pick, old, new)
        for preset, generic in zip(validate(before), validate(after), strict=True):
            assert preset.error_pct is not None and generic.error_pct == pytest.approx(preset.error_pct)
            assert "generic server" in generic.label and "generic server" not in preset.label


def test_a_gnn_row_on_one_machine_runs_on_a_generic_server_and_one_on_several_is_refused(tmp_path: Path) -> None:
    before, after = _renamed("gnn", tmp_path, "SALIENT_ART", ",A10G-24GB,", ",NVIDIA A10G,")
    for preset, generic in zip(validate_gnn(before), validate_gnn(after), strict=True):
        if "x1 GPUs" in preset.label:
            assert generic.error_pct == pytest.approx(preset.error_pct) and "generic server" in generic.label
        else:
            assert generic.error_pct is None and "machines are not described" in generic.why_not


def test_a_real_data_resnet_row_on_a_generic_server_says_its_host_is_not_named(tmp_path: Path) -> None:
    """A loader decoding on host cores needs the system's core count, which a GPU name does not give (a V100 is the
    part of two preset systems, the DGX-1 and the DGX-2, so its name alone stands for neither)."""
    before, after = _renamed("classic", tmp_path, "DLE_PYT_RN50_2103", ",V100-SXM2-16GB,", ",Tesla V100-SXM2-16GB,")
    for generic in validate_classic(after):
        assert generic.error_pct is None and "host cores" in generic.why_not


def test_a_gpu_written_otherwise_runs_on_the_one_preset_system_that_carries_it(tmp_path: Path) -> None:
    """``NVIDIA A100-SXM4-80GB`` is the part of one preset system of these tables, the DGX A100: a real-data row so
    named predicts as the shipped row does, host included, and its label says the system was assumed."""
    before, after = _renamed("classic", tmp_path, "DLE_PYT_RN50_2103", ",A100-SXM4-80GB,", ",NVIDIA A100-SXM4-80GB,")
    for shipped, renamed in zip(validate_classic(before), validate_classic(after), strict=True):
        assert shipped.error_pct is not None and renamed.error_pct == pytest.approx(shipped.error_pct)
        assert "(as dgx-a100-ib)" in renamed.label


def test_a_dev_row_naming_a_gpu_of_no_reference_family_runs_on_one_server(tmp_path: Path) -> None:
    lines = dataset_path("dev").read_text().splitlines()
    row = next(line for line in lines if line.startswith("mbridge2511_B200_LLAMA3_8B_8_FP8-CS,"))
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([lines[0], row.replace(",b200-dgx,b200,", ",,h800,")]) + "\n")
    (run,) = read_runs(path)
    cluster = row_cluster(run)
    assert cluster.accelerator == get_accelerator("h800") and cluster.gpus_per_node == SERVER_GPUS


@pytest.mark.parametrize(("name", "file"), [
    ("FLUX.1-dev", "flux-1-dev-1024px.toml"),
    ("black-forest-labs/FLUX.1-dev", "flux-1-dev-1024px.toml"),
    ("flux.1 dev", "flux-1-dev-1024px.toml"),
    ("HunyuanVideo", "hunyuanvideo-720p.toml"),
    ("hunyuanvideo-720p.toml", "hunyuanvideo-720p.toml"),
    ("THUDM/CogVideoX-5b", "cogvideox-5b-480p.toml"),
    ("FLUX.1-schnell", None),
    ("Stable Diffusion 3", None),
])
def test_a_dit_row_may_name_its_model_as_other_tables_write_it(name: str, file: str | None) -> None:
    assert model_file(name) == file


def test_resnet_101_and_152_trace_as_torchvisions_published_sizes() -> None:
    """torchvision's model table (docs.pytorch.org/vision/stable/models.html, ResNet101_Weights.IMAGENET1K_V1 and
    ResNet152_Weights.IMAGENET1K_V1): 44,549,160 and 60,192,808 parameters, 7.80 and 11.51 GFLOPS (multiply-adds)
    per 224 x 224 image."""
    pytest.importorskip("transformers")
    from plait.workloads.traced.tracing import trace

    for name, params, gmacs in (("resnet101", 44_549_160, 7.80), ("resnet152", 60_192_808, 11.51)):
        traced = trace(f"plait.workload.zoo:{name}")
        assert traced.total_params() == params
        assert traced.flops_per_example(backward=False) == pytest.approx(2 * gmacs * 1e9, rel=0.01)


def test_a_classic_row_may_name_resnet_152_in_any_spelling(tmp_path: Path) -> None:
    """The TensorFlow benchmarks page's ResNet-152 rows: the same row as ResNet-50 costs about the ratio of their
    multiply-adds more (11.51 / 4.09 = 2.8 per image, fp32 on a P100: compute-bound)."""
    pytest.importorskip("transformers")
    lines = dataset_path("classic").read_text().splitlines()
    row = next(line for line in lines if line.startswith("TF_BENCH_2017,") and ",P100,1," in line)
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([lines[0], row, row.replace(",ResNet-50,", ",resnet152,")]) + "\n")
    fifty, deeper = validate_classic(path)
    assert ",ResNet-50," in row and fifty.predicted_per_s is not None and deeper.predicted_per_s is not None
    assert 2.3 < fifty.predicted_per_s / deeper.predicted_per_s < 3.0


def test_a_gnn_row_may_write_its_model_and_dataset_as_other_papers_do(tmp_path: Path) -> None:
    """``SAGE`` on ``products`` is GraphSAGE on ogbn-products: the row predicts as the shipped spelling does."""
    before, after = _renamed("gnn", tmp_path, "SALIENT_ART_1GPU", ",ogbn-products,GraphSAGE,", ",products,SAGE,")
    (shipped, *_), (renamed, *_) = validate_gnn(before), validate_gnn(after)
    assert shipped.error_pct is not None and renamed.error_pct == pytest.approx(shipped.error_pct)


def test_a_row_may_name_a_model_file_beside_its_csv(tmp_path: Path) -> None:
    """A user's own model file beside the CSV (or in a models folder there) is read before the shipped ones: here a
    copy of the shipped DLRM with a top MLP twice as wide, which must cost more; a file found nowhere is said."""
    shipped = dataset_path("dlrm").parent / "models" / "dlrm-criteo-fl15.toml"
    (tmp_path / "models").mkdir()
    text = shipped.read_text()
    top = "top_mlp = [1024, 1024, 512, 256, 1]"
    assert top in text
    (tmp_path / "models" / "wider.toml").write_text(text.replace(top, "top_mlp = [2048, 2048, 512, 256, 1]"))
    lines = dataset_path("dlrm").read_text().splitlines()
    row = next(line for line in lines[1:] if ",dlrm-criteo-fl15.toml," in line)
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([lines[0], row, row.replace(",dlrm-criteo-fl15.toml,", ",wider.toml,"),
                               row.replace(",dlrm-criteo-fl15.toml,", ",absent.toml,")]) + "\n")
    plain, wider, absent = validate_dlrm(path)
    assert plain.predicted_per_s is not None and wider.predicted_per_s is not None
    assert wider.predicted_per_s < plain.predicted_per_s
    assert absent.predicted_per_s is None and "neither beside the CSV nor shipped" in absent.why_not


def test_a_dev_row_may_write_its_gpu_as_nvidia_smi_does(tmp_path: Path) -> None:
    """``NVIDIA H100 80GB HBM3`` on 64 GPUs without a system is the H100 SXM on its reference system."""
    lines = dataset_path("dev").read_text().splitlines()
    row = next(line for line in lines if ",dgx-h100-ib,h100-sxm-80gb," in line)
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([lines[0], row.replace(",dgx-h100-ib,h100-sxm-80gb,", ",,NVIDIA H100 80GB HBM3,")]) + "\n")
    (run,) = read_runs(path)
    cluster = row_cluster(run)
    assert cluster.accelerator == get_accelerator("h100-sxm-80gb") and cluster.name == get_cluster("dgx-h100-ib").name


def test_a_v100_row_without_a_system_runs_on_the_dgx2_and_a_pcie_card_on_one_server(tmp_path: Path) -> None:
    """Megatron-LM's V100 runs used DGX-2H servers; a V100 PCIe card is not that system's part, so its 128 GPUs,
    across servers, are refused."""
    lines = dataset_path("dev").read_text().splitlines()
    row = next(line for line in lines if ",dgx-h100-ib,h100-sxm-80gb," in line)
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([lines[0], row.replace(",dgx-h100-ib,h100-sxm-80gb,", ",,v100,"),
                               row.replace(",dgx-h100-ib,h100-sxm-80gb,", ",,v100-pcie,")]) + "\n")
    sxm, pcie = read_runs(path)
    assert sxm.n_gpus == 128 and row_cluster(sxm).name == get_cluster("dgx2-v100").name
    with pytest.raises(ConfigError, match="no system and no reference system"):
        row_cluster(pcie)


def test_fp16_mixed_precision_may_be_written_otherwise_and_bf16_rows_are_predicted(tmp_path: Path) -> None:
    """``FP16`` and ``mixed`` are NVIDIA's AMP (``amp``): the same prediction; ``bf16`` is a precision of its own."""
    before, after = _renamed("dlrm", tmp_path, "DLE_PYT_DLRM_2110", ",amp,", ",FP16,")
    for shipped, renamed in zip(validate_dlrm(before), validate_dlrm(after), strict=True):
        assert shipped.error_pct is not None and renamed.error_pct == pytest.approx(shipped.error_pct)
    before, after = _renamed("dlrm", tmp_path, "A100-SXM4-80GB,1,", ",amp,", ",bf16,")
    for shipped, bf16 in zip(validate_dlrm(before), validate_dlrm(after), strict=True):
        assert bf16.error_pct is not None and "bf16" in bf16.label
