"""Optimizer options run as the cost model describes them (fp32, gloo, spawned ranks).

- ``optimizer = "sgd"`` builds SGD with momentum (one moment, as ``optimizer_bytes_per_param`` costs it), also
  as ZeRO-1's ``optimizer_class``;
- ``offload_optimizer`` alone is ZeRO-Offload (Ren et al. 2021): parameters stay where they are, the fp32 host
  copies and moments take the step, under DDP and FSDP2 ZeRO-3;
- ``offload_params`` (with ``offload_optimizer``) is FSDP2's ``CPUOffloadPolicy``.

Each case trains 10 steps and matches the one-process run with the same optimizer within 1e-5 relative.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.support import check_runnable
from plait.workload.catalog import resolve_model
from tests.ranks import run_ranks
from tests.test_runtime import MODEL, STEPS, losses, write_plan

CASES = {  # name: (processes, plan body, optimizer of the one-process reference)
    "sgd-zero1": (2, 'dp_shard = 2\nsharding = "zero1"\noptimizer = "sgd"', "sgd"),
    "offload-optimizer-ddp": (2, "dp_replicate = 2\noffload_optimizer = true", "adamw"),
    "offload-optimizer-zero3": (2, 'dp_shard = 2\nsharding = "zero3"\noffload_optimizer = true', "adamw"),
    "offload-params-zero3": (2, 'dp_shard = 2\nsharding = "zero3"\noffload_optimizer = true\noffload_params = true',
                             "adamw"),
}


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[str, list[float]]:
    tmp = tmp_path_factory.mktemp("references")
    return {name: losses(1, write_plan(tmp / f"{name}.toml", f'optimizer = "{name}"'), tmp / f"{name}.jsonl")
            for name in ("adamw", "sgd")}


@pytest.mark.slow
def test_sgd_is_not_adamw(references: dict[str, list[float]]) -> None:
    """The option has an effect: one process with SGD trains differently from AdamW, and it trains."""
    assert references["sgd"][0] == pytest.approx(references["adamw"][0], rel=1e-6)  # same model, same first batch
    assert references["sgd"][1:] != pytest.approx(references["adamw"][1:], rel=1e-3)
    assert references["sgd"][-1] < references["sgd"][0]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_optimizer_option_matches_single_process(name: str, references: dict[str, list[float]],
                                                 tmp_path: Path) -> None:
    nproc, body, reference = CASES[name]
    got = losses(nproc, write_plan(tmp_path / "plan.toml", body), tmp_path / "m.jsonl")
    assert len(got) == STEPS
    assert got == pytest.approx(references[reference], rel=1e-5)


INSPECT = '''
import json, sys
import torch, torch.distributed as dist
from plait.plan.plan import Plan
from plait.run.mesh import build_mesh
from plait.run.model import build_model
from plait.run.optim import HostOffloadOptimizer, build_optimizer
from plait.run.parallel import parallelize
from plait.run.train import TrainConfig
from plait.workload.catalog import resolve_model

dist.init_process_group("gloo")
spec = resolve_model(sys.argv[1])
layouts = {"zero3": dict(dp_shard=2, sharding="zero3"), "ddp": dict(dp_replicate=2)}
for layout, offload_params in (("zero3", False), ("ddp", False), ("zero3", True)):
    plan = Plan(**layouts[layout], offload_optimizer=True, offload_params=offload_params, global_batch=8,
                micro_batch=2).with_seq_len(spec.seq_len)
    mesh = build_mesh(plan)
    model = parallelize(build_model(spec, plan.seq_len, 0), mesh, plan, full_precision=True)
    fsdp_params = [fp for m in model.modules() if hasattr(m, "_get_fsdp_state")
                   for fp in m._get_fsdp_state()._fsdp_param_group.fsdp_params]
    params = list(model.parameters())
    optimizer, _ = build_optimizer(params, mesh, TrainConfig())
    local = lambda t: t.to_local() if hasattr(t, "to_local") else t
    row = {"layout": layout, "offload_params": offload_params, "optimizer": type(optimizer).__name__,
           "fsdp_params": len(fsdp_params), "fsdp_offload": any(fp.offload_to_cpu for fp in fsdp_params)}
    if isinstance(optimizer, HostOffloadOptimizer):
        with torch.no_grad():
            before = [local(p).clone() for p in params]
        row["separate"] = all(h.data_ptr() != local(p).data_ptr() for h, p in zip(optimizer.host_params, params))
        row["inner"] = type(optimizer.inner).__name__
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer.step()
        state = [optimizer.state[h] for h in optimizer.host_params]
        row["state_on_host_copies"] = all(s and s["exp_avg"].device.type == "cpu" for s in state)
        with torch.no_grad():
            row["moved"] = all(not torch.equal(local(p), b) for p, b in zip(params, before))
            row["copied_back"] = all(torch.equal(local(p), h) for p, h in zip(params, optimizer.host_params))
    if dist.get_rank() == 0:
        print("ROW " + json.dumps(row))
dist.destroy_process_group()
'''


def test_offload_optimizer_alone_keeps_parameters_in_place(tmp_path: Path) -> None:
    """Only the optimizer goes to the host: FSDP2 gets no CPUOffloadPolicy unless offload_params, and the
    step runs on separate fp32 host copies whose result is copied back into the parameters."""
    script = tmp_path / "inspect_offload.py"  # not inspect.py: that shadows the standard library
    script.write_text(INSPECT)
    out = run_ranks(2, [str(script), str(MODEL)], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {(r["layout"], r["offload_params"]): r
            for r in (json.loads(line[4:]) for line in out.stdout.splitlines() if line.startswith("ROW "))}
    zero3, ddp, both = rows[("zero3", False)], rows[("ddp", False)], rows[("zero3", True)]
    assert zero3["fsdp_params"] > 0 and not zero3["fsdp_offload"]
    for row in (zero3, ddp):
        assert row["optimizer"] == "HostOffloadOptimizer" and row["inner"] == "AdamW"
        assert row["separate"] and row["state_on_host_copies"] and row["moved"] and row["copied_back"]
    assert both["fsdp_offload"] and both["optimizer"] == "AdamW"  # FSDP2 offloads parameters and the step


def test_checkpointing_an_offloaded_optimizer_is_refused() -> None:
    """DCP cannot map the host copies' state to the model; the worker calls this before the first step."""
    import torch

    from plait.run.checkpoint import check_optimizer
    from plait.run.optim import HostOffloadOptimizer

    layer = torch.nn.Linear(4, 4)
    optimizer = HostOffloadOptimizer(list(layer.parameters()), lambda host: torch.optim.AdamW(host))
    with pytest.raises(ConfigError, match="checkpointing offload_optimizer without offload_params"):
        check_optimizer(optimizer)
    check_optimizer(torch.optim.AdamW(layer.parameters()))  # the plain optimizer checkpoints


@pytest.mark.parametrize("plan,fragment", [
    (Plan(dp_shard=2, sharding="zero3", offload_params=True, global_batch=8),
     "offload_params=true with offload_optimizer=false is not supported by plait@0.1"),
    (Plan(dp_shard=2, sharding="zero1", offload_optimizer=True, global_batch=8), "offload_optimizer=true with sharding='zero1' is not supported by plait@0.1"),
])
def test_offload_combinations_torch_cannot_run_are_refused(plan: Plan, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        check_runnable(plan, resolve_model(str(MODEL)), on_gpu=False)
