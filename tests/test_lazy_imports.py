"""A transformer estimate imports only what it uses: no other workload kind, no mixed-cluster code, no torch, no
point-to-point synchronization costs, no plan-file reader, no column operations over arrays, without a pipeline no
event simulator and no numpy, and with ``--json`` no rich."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "plait.workloads.gnn.", "plait.workloads.dit.", "plait.workloads.dlrm.", "plait.workloads.glm.",
             "plait.workloads.federated.", "plait.cli.mixed", "plait.predict.mixed", "plait.hardware.mixed",
             "plait.hardware.mixed_catalog", "plait.plan.mixed", "plait.plan.io", "plait.workload.hf_config",
             "plait.cost.servers", "plait.cost.async_sgd", "plait.cost.gossip", "plait.cost.site_sync", "plait.events",
             "plait.cost.sync", "plait.sync.hooks", "plait.cost.partial_times", "plait.plan.partial", "plait.cost.tp2d",
             "plait.engine.backend_views", "rich._emoji_codes",
             *(f"plait.sync.{family}" for family in ("asynchronous", "crossbow", "gossip", "half", "periodic", "powersgd",
                                                     "servers", "site_quantize", "site_topk", "sparse")))
"""Modules (and their submodules) a transformer's ``plait estimate`` has no use for. Of the other workload kinds only
the registry's descriptors load (``plait.workloads.gnn`` itself: how a file is recognised and which options are the
kind's, which the transformer kind refuses), never their models, costs or searches (a trailing dot: submodules).
An all-reducing plan named by options needs neither the parameter-server, gossip, asynchronous or per-site costs
(nor the event simulation of asynchronous SGD), nor the other methods' classes or costs (``plait.cost.sync``, its
hooks, partial averaging), nor the plan-file and Hugging Face config readers; a 1-D tensor-parallel plan no grid
costs; collectives on the cluster's own library no other library's figures (``plait.engine.backend_views``); rich
prints plait's text without its emoji codes."""
BATCH_ONLY = ("plait.plan.array_ops", "plait.plan.keys")
"""What only array columns (a batch of plans) need: one plan's columns hold Python numbers
(:data:`plait.plan.ops.SCALAR`)."""
PIPELINE_ONLY = ("plait.simulate.costs", "plait.simulate.pipeline", "plait.cost.per_stage", "numpy")
"""What only a pipeline's event simulation (or stages costed one at a time) needs: a pp=1 estimate runs without
(numpy: the simulation's periodic sweep order, :mod:`plait.simulate.periodic`)."""
TABLES_ONLY = ("rich",)
"""What only the tables need: ``--json`` prints without it."""

PROBE = """
import json, sys
from plait.cli.main import run_cli
code = run_cli(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules_after(argv: list[str]) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120, check=True)
    last = json.loads(done.stdout.strip().splitlines()[-1])
    return last["code"], last["modules"]


@pytest.mark.parametrize("argv", [["estimate"], ["estimate", "--cluster", "dgx-a100-ib", "--model", "llama3-70b",
                                                 "--gpus", "64", "--tp", "8", "--pp", "2", "--json"]])
def test_transformer_estimate_imports_no_other_kind(argv: list[str]) -> None:
    code, modules = _modules_after(argv)
    assert code == 0
    forbidden = (FORBIDDEN + BATCH_ONLY + (TABLES_ONLY if "--json" in argv else ())
                 + (() if "--pp" in argv else PIPELINE_ONLY))
    loaded = [m for m in modules if any(m.startswith(f) if f.endswith(".") else m == f or m.startswith(f + ".")
                                        for f in forbidden)]
    assert loaded == [], f"plait {' '.join(argv)} imported {loaded}"
    assert "plait.predict.estimate" in modules  # the probe did run an estimate


def test_mixed_preset_still_recognised() -> None:
    """The catalog check that keeps the mixed modules off a plain estimate still routes a mixed preset to them."""
    from plait.cli.cluster_choice import mixed_or_none
    from plait.hardware.catalog import cluster_names
    from plait.hardware.mixed_catalog import mixed_cluster_names

    assert not set(cluster_names()) & set(mixed_cluster_names())  # a preset name is never a mixed preset's
    assert mixed_or_none(None) is None and mixed_or_none(cluster_names()[0]) is None
    mixed = mixed_or_none(mixed_cluster_names()[0])
    assert mixed is not None and len(mixed.groups) > 1


def test_catalog_classes_state_their_field_types_as_objects() -> None:
    """The classes an estimate builds from its catalogs and options keep evaluated annotations: as strings (``from
    __future__ import annotations``), dataclasses would match each against a pattern and :func:`plait.schema.build`
    compile and evaluate each, in every process."""
    from dataclasses import fields

    from plait.engine.facts import EngineFacts
    from plait.hardware.accelerator import Accelerator, Efficiency
    from plait.hardware.cluster import Cluster, InNetworkAggregation, NetworkTier
    from plait.hardware.figure import Curve, Figure
    from plait.hardware.power_states import PowerStates
    from plait.plan.plan import Plan
    from plait.workload.model import LocalAttention, MlaSpec, ModelSpec, MoeSpec

    classes = (EngineFacts, Accelerator, Efficiency, Cluster, InNetworkAggregation, NetworkTier, Curve, Figure,
               PowerStates, Plan, LocalAttention, MlaSpec, ModelSpec, MoeSpec)
    strings = [f"{cls.__name__}.{f.name}" for cls in classes for f in fields(cls) if isinstance(f.type, str)]
    assert strings == []


def test_converge_checks_its_options_without_torch() -> None:
    """``plait converge`` refuses a bad option before it starts the ranks, without importing torch (its ranks import
    it; the launching process only checks and starts them)."""
    if importlib.util.find_spec("torch") is None:  # found, not imported (seconds): without it, the missing extra
        pytest.skip("needs torch (pip install 'plait[run]')")
    code, modules = _modules_after(["converge", "--dp-sync", "topk:ratio=0.01", "--optimizer", "lamb"])
    assert code == 2 and "torch" not in modules and "plait.run.converge_runs" in modules


RUN_PROBE = """
import json, sys
import plait.run.launch as launch
launch.supervise = lambda *args, **kwargs: 1  # the launching process alone: a run whose ranks failed
from plait.cli.main import run_cli
code = run_cli(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules), "gpu_build": launch.local_slots() is not None}))
"""


def test_plait_run_launches_without_torch_on_a_cpu_build() -> None:
    """On a CPU-only build of torch, ``plait run`` checks the plan and starts torchrun without importing torch
    (torchrun and the ranks import it): no CUDA device to count, no checkpoint folder to read."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch (pip install 'plait[run]')")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", RUN_PROBE, "run", "--plan", "examples/tiny-plan.toml", "--steps",
                           "1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    last = json.loads(done.stdout.strip().splitlines()[-1])
    if last["gpu_build"]:
        pytest.skip("a CUDA or ROCm build of torch: plait run imports it to count the GPUs")
    assert last["code"] == 1 and "plait.run.plan_run" in last["modules"] and "torch" not in last["modules"]
