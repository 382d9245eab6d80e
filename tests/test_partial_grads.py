"""Sequence parallelism leaves the norm weights' gradients as partial sums; the runtime reduces them once per step."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).parents[1]


def _rank(rank: int, port: int, out: str) -> None:
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Partial, Replicate

    from plait.plan.plan import Plan
    from plait.run.mesh import build_mesh
    from plait.run.model import build_model
    from plait.run.parallel import parallelize
    from plait.run.train import cross_entropy, reduce_partial_gradients
    from plait.workload.catalog import resolve_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    spec = resolve_model(str(ROOT / "examples" / "tiny-model.toml"))
    plan = Plan(tp=2, sp=True, global_batch=2, micro_batch=2).with_seq_len(spec.seq_len)
    model = parallelize(build_model(spec, spec.seq_len, 0), build_mesh(plan), plan, full_precision=True)
    x = torch.randint(0, spec.vocab_size, (2, spec.seq_len), generator=torch.Generator().manual_seed(0))
    cross_entropy(model(x), x).backward()
    params = list(model.parameters())
    partial = [n for n, p in model.named_parameters()
               if isinstance(p.grad, DTensor) and any(isinstance(pl, Partial) for pl in p.grad.placements)]
    expected = {n: p.grad.redistribute(placements=[Replicate()]).to_local().clone()  # DTensor's own reduction
                for n, p in model.named_parameters() if n in partial}
    issued = reduce_partial_gradients(params)
    named = dict(model.named_parameters())
    left = [n for n, p in named.items() if any(isinstance(pl, Partial) for pl in p.grad.placements)]
    equal = all(torch.equal(named[n].grad.to_local(), expected[n]) for n in partial)
    if rank == 0:
        Path(out).write_text(json.dumps({"partial": partial, "issued": issued, "left": left, "equal": equal}))
    dist.barrier()
    os._exit(0)  # as plait.run.worker: gloo's threads can abort a normal interpreter teardown


def test_partial_norm_gradients_are_reduced_in_one_all_reduce(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "result.json"
    mp.start_processes(_rank, args=(port, str(out)), nprocs=2, start_method="spawn")
    result = json.loads(out.read_text())
    assert any(name.endswith("norm.weight") for name in result["partial"])  # SP norms are partial sums
    assert result["issued"] == 1  # one flat all-reduce for all of them
    assert result["left"] == []
    assert result["equal"]  # the same values DTensor's own Partial -> Replicate gives
