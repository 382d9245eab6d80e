"""Host time of an AdamW step with gradient clipping over FSDP2-sharded (DTensor) parameters against plain tensors.

Run: python benchmarks/dtensor_optimizer_host.py [--layers 32] [--steps 20]
On two gloo CPU ranks (spawned here), builds the parameter list of a Llama-style model of ``--layers`` blocks (nine
tensors a block: q, k, v, o, gate, up, down and two norms; plus embedding, output and final norm: Llama 3 8B's 291
at 32 layers) with tiny shapes, so that the kernels cost next to nothing and what is timed is the host's dispatch, and
times ``clip_grad_norm_(foreach=True)`` then ``AdamW.step()`` (betas and weight decay as torchtitan's) with the
foreach and the fused implementation, on plain tensors and on DTensors sharded over the two ranks (FSDP2's
parameters). Prints rank 0's median milliseconds per step (wall) and the machine's load. What it measures: the
per-step host work a torchtitan (FSDP2) run adds after its backward, which plait does not charge
(``src/plait/validate/data/torchtitan_runs.md``); on a GPU the same dispatch runs on the GPU's host.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average


def _shapes(layers: int) -> list[tuple[int, ...]]:
    """The parameter shapes of a Llama-style model, tiny (64-wide) so that the arithmetic is negligible."""
    block = [(64, 64)] * 7 + [(64,)] * 2
    return block * layers + [(256, 64), (256, 64), (64,)]


def _rank(rank: int, init: str, layers: int, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    for kind in ("plain", "dtensor"):
        params = []
        for shape in _shapes(layers):
            value, grad = torch.randn(*shape), torch.randn(*shape)
            if kind == "dtensor":
                value, grad = distribute_tensor(value, mesh, [Shard(0)]), distribute_tensor(grad, mesh, [Shard(0)])
            p = torch.nn.Parameter(value)
            p.grad = grad
            params.append(p)
        for impl in ("foreach", "fused"):
            opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                    foreach=impl == "foreach", fused=impl == "fused")
            times = []
            for step in range(steps + 3):
                dist.barrier()
                start = time.perf_counter()
                torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                opt.step()
                if step >= 3:  # the first steps create the optimizer state
                    times.append(time.perf_counter() - start)
            if rank == 0:
                print(f"  {kind:8s} {impl:8s} {statistics.median(times) * 1e3:7.1f} ms a step "
                      f"({len(params)} tensors)", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32, help="transformer blocks (32: Llama 3 8B's 291 tensors)")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.layers < 1 or args.steps < 1:
        sys.exit(f"--layers {args.layers} and --steps {args.steps} must be >= 1")
    import torch
    import torch.multiprocessing as mp

    print(f"torch {torch.__version__}; clip_grad_norm_ then AdamW.step on 2 gloo CPU ranks; "
          f"load average (1, 5, 15 min) {load_average()} before")
    with tempfile.TemporaryDirectory() as folder:
        init = f"file://{os.path.join(folder, 'rendezvous')}"
        mp.spawn(_rank, args=(init, args.layers, args.steps), nprocs=2, join=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
