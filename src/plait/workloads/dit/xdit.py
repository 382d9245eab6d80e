"""A DiT plan as xDiT's command-line arguments (xDiT's ``xFuserArgs``, xfuser/config/args.py): the
degrees of CFG, PipeFusion (with its patches), Ulysses, ring and tensor parallelism, the image and the steps, for
``torchrun --nproc_per_node N <xDiT example script> ...``. DistriFusion is not one of xDiT's methods (it is
``distrifuser``'s): such a plan is refused in one line."""

from __future__ import annotations

from plait.errors import ConfigError
from plait.workloads.dit.cost import DitPlan
from plait.workloads.dit.model import DitJob, DitSpec


def xdit_arguments(spec: DitSpec, job: DitJob, plan: DitPlan, model_path: str) -> list[str]:
    """xDiT's arguments for ``plan`` (``model_path``: the Hugging Face id or folder xDiT loads)."""
    if plan.distrifusion > 1:
        raise ConfigError(f"distrifusion={plan.distrifusion}: xDiT has no DistriFusion; run it with distrifuser "
                          "(mit-han-lab/distrifuser, DistriConfig(parallelism='patch'))")
    args = ["--model", model_path, "--height", str(job.pixels_high), "--width", str(job.resolution),
            "--num_inference_steps", str(job.steps), "--pipefusion_parallel_degree", str(plan.pipefusion),
            "--ulysses_degree", str(plan.ulysses), "--ring_degree", str(plan.ring),
            "--tensor_parallel_degree", str(plan.tp)]
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
    return args


def torchrun_line(spec: DitSpec, job: DitJob, plan: DitPlan, model_path: str, script: str) -> str:
    """The whole launch line for ``plan.gpus`` processes on one node."""
    return " ".join(["torchrun", f"--nproc_per_node={plan.gpus}", script,
                     *xdit_arguments(spec, job, plan, model_path)])
