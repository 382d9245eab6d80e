"""A DiT plan as xDiT's launch line (xdit-project/xDiT, xfuser 0.7.0): the degrees of CFG, PipeFusion (with its
patches), Ulysses and ring, the image and the steps, for each catalog model xDiT runs.

xDiT starts a model one of two ways: models of its unified runner by ``xdit --model NAME ...`` (xfuser/cli.py:
torchrun with as many processes as the degrees multiply to; arguments ``xFuserArgs.add_runner_args``), the
others by one of its example scripts, ``torchrun --nproc_per_node=N examples/SCRIPT --model HF_ID ...``
(``xFuserArgs.add_cli_args``, from a checkout of xDiT). Each model supports some methods only; a plan using another
is not one xDiT runs. DistriFusion is not one of xDiT's methods (it is ``distrifuser``'s), xDiT implements tensor
parallelism for none of these models, and its CPU offload (diffusers' sequential offload) does not prefetch as
plait's layer-wise offload is costed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal

from plait.errors import ConfigError
from plait.workloads.dit.cost import DitPlan
from plait.workloads.dit.model import DitJob, DitSpec

Method = Literal["cfg", "pipefusion", "ulysses", "ring"]
PROMPT = "brown dog laying on the ground with a metal bowl in front of him."
"""The prompt of xDiT's examples/run.sh (any prompt launches the same work)."""


@dataclass(frozen=True, kw_only=True)
class XditModel:
    """How xDiT launches one catalog model and which of its methods that launch supports."""

    name: str
    """``--model``: the runner's registered name, or the Hugging Face id the script loads."""
    script: str
    """The example script; empty: the unified runner (``xdit``)."""
    methods: frozenset[Method]
    source: str


XDIT_MODELS: dict[str, XditModel] = {
    "black-forest-labs/FLUX.1-dev": XditModel(
        name="black-forest-labs/FLUX.1-dev", script="", methods=frozenset({"pipefusion", "ulysses", "ring"}),
        source="xfuser/model_executor/models/runner_models/flux.py (xfuser 0.7.0): @register_model, "
               "ModelCapabilities(ulysses_degree, ring_degree, pipefusion_parallel_degree)"),
    "hunyuanvideo-community/HunyuanVideo": XditModel(
        name="tencent/HunyuanVideo", script="", methods=frozenset({"ulysses", "ring"}),
        source="xfuser/model_executor/models/runner_models/hunyuan.py (xfuser 0.7.0): @register_model"
               "('tencent/HunyuanVideo'), ModelCapabilities(ulysses_degree, ring_degree)"),
    "PixArt-alpha/PixArt-XL-2-1024-MS": XditModel(
        name="PixArt-alpha/PixArt-XL-2-1024-MS", script="examples/pixartalpha_example.py",
        methods=frozenset({"cfg", "pipefusion", "ulysses", "ring"}),
        source="examples/pixartalpha_example.py and examples/run.sh (xfuser 0.7.0): xFuserPixArtAlphaPipeline"),
    "Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers": XditModel(
        name="Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers", script="examples/sana_example.py",
        methods=frozenset({"cfg", "pipefusion", "ulysses", "ring"}),
        source="examples/sana_example.py (xfuser 0.7.0); docs/performance/sana.md lists PipeFusion, Ulysses, "
               "Ring and CFG"),
    "BestWishYsh/ConsisID-preview": XditModel(
        name="BestWishYsh/ConsisID-preview", script="examples/consisid_example.py",
        methods=frozenset({"cfg", "ulysses", "ring"}),
        source="examples/consisid_example.py (xfuser 0.7.0): 'This script does not support PipeFusion.'"),
    "THUDM/CogVideoX-5b": XditModel(
        name="THUDM/CogVideoX-5b", script="examples/cogvideox_example.py", methods=frozenset({"cfg", "ulysses", "ring"}),
        source="examples/cogvideox_example.py (xdit-project/xDiT@0058bb00): xFuserCogVideoXPipeline, 'This script "
               "does not support PipeFusion.'; docs/performance/cogvideo.md: USP (Ulysses, Ring) and CFG parallel"),
}
"""Keyed by the catalog model's ``hf_model``. Mochi (genmo/mochi-1-preview) has neither a runner model nor an
example script in xfuser 0.7.0."""


def xdit_model(spec: DitSpec) -> XditModel:
    """How xDiT launches ``spec``; one line naming the model when it does not."""
    model = XDIT_MODELS.get(spec.hf_model)
    if model is None:
        what = f"hf_model={spec.hf_model!r}" if spec.hf_model else "no hf_model"
        raise ConfigError(f"{spec.name} ({what}): xDiT (xfuser 0.7.0) has no runner model or example script for it; "
                          f"it runs {', '.join(sorted(XDIT_MODELS))}")
    return model


def unsupported(spec: DitSpec, plan: DitPlan) -> str:
    """Why xDiT does not run ``plan`` for ``spec`` ('' when it does)."""
    model = xdit_model(spec)
    if plan.distrifusion > 1:
        return "DistriFusion is distrifuser's (mit-han-lab/distrifuser), not xDiT's"
    if plan.tp > 1:
        return "xDiT has no tensor parallelism for this model"
    if plan.offload:
        return "xDiT's CPU offload is diffusers' sequential offload, not layer-wise prefetch"
    used = {m for m, degree in (("cfg", plan.cfg), ("pipefusion", plan.pipefusion), ("ulysses", plan.ulysses),
                                ("ring", plan.ring)) if degree > 1}
    missing = sorted(used - model.methods)
    return f"{model.name} in xDiT supports no {', '.join(missing)}" if missing else ""


def xdit_arguments(spec: DitSpec, job: DitJob, plan: DitPlan) -> list[str]:
    """xDiT's arguments for ``plan`` (after the launcher)."""
    why = unsupported(spec, plan)
    if why:
        raise ConfigError(f"{plan.label()}: {why}")
    model = xdit_model(spec)
    args = ["--model", model.name, "--height", str(job.pixels_high), "--width", str(job.resolution),
            "--num_inference_steps", str(job.steps), "--pipefusion_parallel_degree", str(plan.pipefusion),
            "--ulysses_degree", str(plan.ulysses), "--ring_degree", str(plan.ring)]
    if plan.pipefusion > 1:
        args += ["--num_pipeline_patch", str(plan.patches)]
    if plan.cfg > 1:
        args.append("--use_cfg_parallel")
    if spec.text_tokens:
        args += ["--max_sequence_length", str(spec.text_tokens)]
    if job.frames > 1:
        args += ["--num_frames", str(job.frames)]
    if job.compiled:
        args.append("--use_torch_compile")
    return [*args, "--prompt", PROMPT]


def launch_line(spec: DitSpec, job: DitJob, plan: DitPlan) -> str:
    """The whole launch line for ``plan.gpus`` processes on one node."""
    model, args = xdit_model(spec), xdit_arguments(spec, job, plan)
    launcher = ["xdit"] if not model.script else ["torchrun", f"--nproc_per_node={plan.gpus}", model.script]
    return shlex.join([*launcher, *args])
