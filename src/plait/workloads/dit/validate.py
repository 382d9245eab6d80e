"""Predicted vs measured latency of parallel diffusion-transformer inference: public tables of xDiT and
ParaAttention (``plait/validate/data/dit_latency.csv``; every source, commit and caveat in ``plait/validate/data/dit_latency.md``),
each costed with the shipped model file its model names, on the preset (or shipped one-node cluster file) of its GPU.

The error is on the latency end to end (predicted over measured, minus one): the measured figures time the whole
pipeline call, so the prediction is :mod:`plait.workloads.dit.pipeline`'s: text encoders, the denoising loop with
the host's launches (eager, or torch.compile where the row's notes say ``compile=yes``; ``compile=unknown`` rows
ran the examples' default, eager), and the VAE decode. Rows plait cannot predict say why: a GPU without a
description, or a row that states no resolution where its example passes none to a pipeline whose default is not
read here (``PIPELINE_DEFAULTS``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from plait.hardware.catalog import get_cluster, load_cluster_file
from plait.hardware.cluster import Cluster
from plait.hardware.server import gpu_server, server_problem
from plait.validate.classic import ClassicResult
from plait.validate.datasets import dataset_path, model_path
from plait.validate.progress import Progress, each
from plait.validate.records import Record, plain, read_records
from plait.validate.systems import gpu_label
from plait.workloads.dit.cost import DitPlan, estimate_dit
from plait.workloads.dit.model import check_dit, read_dit
from plait.workloads.dit.pipeline import end_to_end

MODELS = {"FLUX.1-dev": "flux-1-dev-1024px.toml", "Sana_1600M_4Kpx_BF16_diffusers": "sana-1600m-4k.toml",
          "ConsisID (preview)": "consisid-480p.toml", "HunyuanVideo (T2V)": "hunyuanvideo-720p.toml",
          "Mochi-1-preview": "mochi-1-480p.toml", "CogVideoX-5b": "cogvideox-5b-480p.toml"}
"""Model names of the CSV -> the model file shipped beside the CSV in ``plait/validate/data/models`` (package data,
the same file as ``examples/``; its job's resolution, frames and steps are the row's; a row that states no steps
takes the file's, the implementation's default that the file cites). A row may name a model as other tables write
it (:func:`model_file`)."""
ALIASES = {"HunyuanVideo": "hunyuanvideo-720p.toml", "Mochi 1": "mochi-1-480p.toml", "ConsisID": "consisid-480p.toml"}
"""Other names of the shipped models: the model's own name without the variant the CSV's source appended."""


def _plain(name: str) -> str:
    """A model name compared without case, punctuation, spaces or a Hugging Face owner (``black-forest-labs/``)."""
    return plain(name.rsplit("/", 1)[-1])


def model_file(name: str) -> str | None:
    """The shipped model file a row's model names: a key of :data:`MODELS` or :data:`ALIASES` however cased and
    punctuated (``flux.1 dev``, ``black-forest-labs/FLUX.1-dev``), or a shipped file's own name; ``None`` if none."""
    files = {_plain(key): file for key, file in (*ALIASES.items(), *MODELS.items())}
    files.update({_plain(file.removesuffix(".toml")): file for file in MODELS.values()})
    return files.get(_plain(name.removesuffix(".toml")))
SYSTEMS = {"H100": "dgx-h100-ib", "A100-SXM4-80GB": "dgx-a100-ib", "A100": "dgx-a100-ib", "H20": "hgx-h20.toml",
           "L40": "l40-pcie.toml"}
"""GPU names of the CSV -> a preset of that GPU, or a one-node cluster file in ``plait/validate/data/clusters`` (the
rows run inside one node); a GPU not here runs on a generic server of it (:mod:`plait.hardware.server`)."""


PIPELINE_DEFAULTS = {("PARAATTN_README_A100", "FLUX.1-dev"): ("1024x1024", 0),
                     ("PARAATTN_README_A100", "Mochi-1-preview"): ("848x480x84f", 28)}
"""(source, model) -> the resolution (and steps, 0: the row's) a row that states none ran at, where its example
passes none and the pipeline's default is read:

- FLUX.1 in ParaAttention's README example (cf7ec43): no height or width; diffusers' FluxPipeline ``height = height
  or self.default_sample_size * self.vae_scale_factor`` with ``default_sample_size = 64`` and ``vae_scale_factor =
  2 ** len(block_out_channels)`` = 16 for FLUX.1's four-level VAE (diffusers 0.31.0, pipelines/flux/pipeline_flux.py
  lines 197-204 and 633-634): 1024 x 1024.
- Mochi 1 there: ``pipe(prompt, num_frames=84)``, so 84 frames and MochiPipeline's defaults otherwise, as they
  stood when the table was published (2024-11-14; no release had Mochi before diffusers 0.32.0 of December):
  ``default_height = 480``, ``default_width = 848`` and ``num_inference_steps: int = 28`` in
  pipelines/mochi/pipeline_mochi.py as added (huggingface/diffusers@3f329a426a, 2024-11-05, lines 209-210 and 481);
  64 steps came with @128b96f369 (2024-12-17, 'Fix Mochi Quality Issues')."""

VAE_TILING = {("PARAATTN_README_A100", "Mochi-1-preview"): (256, 192, 0, 0),
              ("XDIT_DOC_HUNYUANVIDEO", "HunyuanVideo (T2V)"): (256, 192, 64, 48)}
"""(source, model) -> (tile, stride) pixels and (run, stride) frames of the tiled VAE decode its timed example turns
on (:mod:`plait.workloads.dit.vae_tiling`); every other row decodes whole:

- ParaAttention's Mochi example calls ``pipe.enable_vae_tiling()`` (README @cf7ec43, line 129, the commit that
  published the numbers), which keeps ``AutoencoderKLMochi``'s defaults, ``tile_sample_min_height = _width = 256``
  and ``tile_sample_stride_height = _width = 192`` (diffusers@3f329a426a, autoencoder_kl_mochi.py lines 814-819).
- HunyuanVideo's official script tiles by default (``--vae-tiling``, ``set_defaults(vae_tiling=True)``,
  hyvideo/config.py line 79 @fa14b00; the pipeline calls ``self.vae.enable_tiling()``, which turns on spatial and
  temporal tiling, hyvideo/vae/autoencoder_kl_causal_3d.py lines 150-157): tiles of the checkpoint's ``sample_size``
  256 px and runs of its ``sample_tsize`` 64 frames (the checkpoint's VAE config.json, as kohya-ss/musubi-tuner
  @1b21831e writes it out in src/musubi_tuner/hunyuan_model/vae.py), starting every three quarters of a tile
  (``tile_overlap_factor`` 0.25): 192 px and 48 frames.
- Not here, with the reason: xDiT's Sana example tiles its DC-AE decode at 1024 px (stride 448) at the table's
  commit, but that decode, ~4.5x the whole one, would exceed the whole measured latency of its 8-GPU rows
  (``dit_latency.md``)."""

TENSOR_OUTPUT = {"XDIT_DOC_HUNYUANVIDEO", "MOCHI_XDIT_L40"}
"""Sources whose timed call hands back the decoded tensor or array, not PIL images (``DitJob.output = "tensor"``):

- HunyuanVideo's official ``hyvideo/inference.py`` (Tencent/HunyuanVideo@fa14b001, lines 647-670) times its
  pipeline, which ends ``image = image.cpu().float()`` (``pipeline_hunyuan_video.py`` line 1092) whatever
  ``output_type``;
- mochi-xdit's ``demos/cli.py`` (xdit-project/mochi-xdit@5f27f34d, lines 110-116) gets a float32 numpy array from
  genmo's pipeline.

Every other source runs a diffusers pipeline at its default ``output_type="pil"`` (xDiT's examples pass
``input_config.output_type``, whose default is ``"pil"``: xfuser/config/args.py; ParaAttention's README examples
pass none)."""

COLUMNS = ("source_id", "model", "resolution", "steps", "batch", "gpu", "gpus", "parallel", "measured_latency_s",
           "notes")
"""The columns a row's prediction reads (the parallel degrees may follow; ``plait/validate/data/dit_latency.md``)."""


def _degree(row: Record, key: str) -> int:
    return row.count(key, default=1)


def _cluster(name: str) -> Cluster:
    if name.endswith(".toml"):
        return load_cluster_file(dataset_path("dit").parent / "clusters" / name)
    return get_cluster(name)


def predict_row(row: Record, csv: Path | None = None) -> ClassicResult:
    """The prediction of one CSV row (module docstring) of the file ``csv`` (a model file it names is looked for
    beside it first, :func:`plait.validate.datasets.model_path`; ``None``: the shipped CSV)."""
    compiled = row["notes"].split(";")[0].strip()
    default, default_steps = PIPELINE_DEFAULTS.get((row["source_id"], row["model"]), ("", 0))
    shown = row["resolution"] or (f"{default} (pipeline default)" if default else "?")
    label = f"{row['model']} {shown} {gpu_label(row['gpu'], SYSTEMS)} x{row['gpus']} {row['parallel']} ({compiled})"
    measured = 1.0 / row.number("measured_latency_s")  # latencies as rates: the error is on the latency
    result = lambda why: ClassicResult(row["source_id"], label, measured, None, why)
    file = model_file(row["model"]) or (row["model"] if row["model"].endswith(".toml") else "")
    model = model_path(csv or dataset_path("dit"), file) if file else None
    if model is None:
        return result(f"model {row['model']!r} is not described")
    if row["gpu"] not in SYSTEMS and (problem := server_problem(row["gpu"], row.count("gpus"))):
        return result(problem)
    spec, job = read_dit(model)
    resolution = row["resolution"] or default
    if not resolution:
        return result("the source states no resolution")
    sides = resolution.lower().removesuffix("f").split("x")
    if len(sides) not in (2, 3) or not all(side.isdigit() for side in sides):
        return result(f"resolution {resolution}: must read WIDTHxHEIGHT or WIDTHxHEIGHTxFRAMESf")
    width, height = int(sides[0]), int(sides[1])
    frames = int(sides[2]) if len(sides) == 3 else 1
    steps = row.count("steps") if row.get("steps") else default_steps or job.steps
    job = replace(job, resolution=width, height=0 if height == width else height, frames=frames, steps=steps,
                  batch=row.count("batch", default=1), compiled=compiled == "compile=yes",
                  output="tensor" if row["source_id"] in TENSOR_OUTPUT else "pil")
    tile, stride, run, run_stride = VAE_TILING.get((row["source_id"], row["model"]), (0, 0, 0, 0))
    job = replace(job, vae_tile_px=tile, vae_tile_stride_px=stride, vae_tile_frames=run,
                  vae_tile_stride_frames=run_stride)
    check_dit(spec, job, row.where)
    plan = DitPlan(cfg=_degree(row, "cfg"), ulysses=_degree(row, "ulysses"), ring=_degree(row, "ring"),
                   pipefusion=_degree(row, "pipefusion"), tp=_degree(row, "tp"))
    if plan.pipefusion > 1:
        plan = replace(plan, patches=_degree(row, "patches") if row.get("patches") else plan.pipefusion)
    if plan.gpus != row.count("gpus"):
        return result(f"the degrees multiply to {plan.gpus}, not the row's {row['gpus']} GPUs")
    cluster = _cluster(SYSTEMS[row["gpu"]]) if row["gpu"] in SYSTEMS else gpu_server(row["gpu"], plan.gpus)
    est = estimate_dit(spec, job, plan, cluster)
    return ClassicResult(row["source_id"], label, measured, 1.0 / end_to_end(spec, job, plan, cluster, est).total_s)


def validate_dit(path: Path, progress: Progress | None = None) -> list[ClassicResult]:
    """Every row of ``path`` (the schema of ``plait/validate/data/dit_latency.csv``)."""
    return each(read_records(path, "--dit file", COLUMNS), lambda row: predict_row(row, path), progress)
