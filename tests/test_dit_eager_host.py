"""The host's time per eager op of a DiT step: the launch call plus the framework's dispatch before it
(:mod:`plait.hardware.eager_dispatch`), against a compiled step's launches alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.hardware.catalog import get_cluster
from plait.hardware.eager_dispatch import EAGER_DISPATCH_US
from plait.validate.datasets import dataset_path
from plait.workloads.dit.cost import DitPlan, estimate_dit
from plait.workloads.dit.model import read_dit
from plait.workloads.dit.pipeline import end_to_end, step_kernels


@pytest.mark.parametrize("plan", [DitPlan(), DitPlan(ulysses=2), DitPlan(ring=4)])
def test_an_eager_kernel_costs_its_dispatch_and_launch_a_compiled_one_its_launch(plan: DitPlan) -> None:
    """FLUX.1 at 1024 px on a DGX H100: host time per kernel, eager 10 + 13.3 us, compiled 10 us."""
    spec, job = read_dit(dataset_path("dit").parent / "models" / "flux-1-dev-1024px.toml")
    cluster = get_cluster("dgx-h100-ib")
    launch_us = cluster.accelerator.efficiency.host_launch_us.value
    assert (launch_us, EAGER_DISPATCH_US.value) == (10.0, 13.3)
    for compiled, per_kernel_us in ((False, 23.3), (True, 10.0)):
        run = replace(job, compiled=compiled)
        host_s = end_to_end(spec, run, plan, cluster, estimate_dit(spec, run, plan, cluster)).host_step_s
        assert host_s == pytest.approx(step_kernels(spec, run, plan) * per_kernel_us * 1e-6)


@pytest.mark.parametrize(("model", "key", "dispatched"), [
    ("flux-1-dev-1024px", "eager_kernels", 96), ("flux-1-dev-1024px", "eager_kernels_single", 48),
    ("sana-1600m-4k", "eager_kernels", 46), ("consisid-480p", "eager_kernels", 61)])
def test_the_model_files_eager_counts_match_diffusers_dispatched_ops(model: str, key: str, dispatched: int) -> None:
    """benchmarks/dit_eager_host.py counts the non-view ATen ops diffusers' blocks dispatch (0.31.0 and 0.32.0 alike
    for FLUX.1; 0.32.0 for Sana's block and CogVideoX's, ConsisID's block without its face cross-attention): the model
    files' counts, read from the source by hand, within 5%."""
    spec, _ = read_dit(dataset_path("dit").parent / "models" / f"{model}.toml")
    assert getattr(spec, key) == pytest.approx(dispatched, rel=0.05)
