"""Rank entry: one transformer layer on a 2-D/2.5-D grid against the same layer in one process, with the bytes
each rank handed to torch.distributed beside the cost model's (:mod:`plait.cost.tp2d`).

Run as ``q*q*d`` ranks (``torchrun --nproc-per-node 4 -m plait.run.tp2d_check`` for ``q = 2``; ``--depth 2`` on
8 ranks for 2.5-D). Each rank builds the same seeded weights and batch, runs the grid layer's forward and
backward on its blocks and the reference's on the whole, and writes one JSON line (``--out``, else prints it):
the largest difference of its output and gradients (input, every weight block) from the reference's blocks, and
its counted and predicted bytes per ``(group, kind)`` for the forward and for the backward. With ``--plan`` (a
grid plan file) the same ranks then train it as ``plait run`` does (:func:`plait.run.worker.run_job`), in the same
process group: one start of the ranks for both checks.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
import torch.distributed as dist

from plait.cost.tp2d import pass_traffic
from plait.plan.plan import Plan
from plait.run.tp2d import LayerShape, grid_blocks, layer_forward, make_grid, reduce_weight_grads, reference_forward
from plait.run.worker import prepare, run_job
from plait.run.worker_config import WorkerConfig
from plait.workload.model import ModelSpec

SHAPE = LayerShape(hidden=16, heads=4, kv_heads=2, head_dim=4, ffn=32)
SEQ = 8


def _model(shape: LayerShape) -> ModelSpec:
    """A model description of the layer, for the cost model's byte counts."""
    return ModelSpec(name="tp2d-layer", num_layers=1, hidden_size=shape.hidden, num_heads=shape.heads,
                     num_kv_heads=shape.kv_heads, head_dim=shape.head_dim, ffn_hidden_size=shape.ffn,
                     vocab_size=64, seq_len=SEQ, mlp="gated", norm="rmsnorm")


def _predicted(q: int, d: int, seqs: int) -> tuple[dict[str, int], dict[str, int]]:
    h, e, f = SHAPE.hidden, SHAPE.head_dim, SHAPE.ffn
    gemms = [(h, (SHAPE.heads + 2 * SHAPE.kv_heads) * e), (SHAPE.heads * e, h), (h, 2 * f), (f, h)]
    plan = Plan(tp=q * q * d, tp_mode="2.5d" if d > 1 else "2d", tp_depth=d)
    fwd, bwd = pass_traffic(_model(SHAPE), plan, seqs * SEQ, gemms, 4, 4)
    return ({f"{g}/{k}": int(v) for (g, k), v in fwd.bytes_.items()},
            {f"{g}/{k}": int(v) for (g, k), v in bwd.bytes_.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1, help="grids stacked (2.5-D when > 1)")
    parser.add_argument("--out", type=Path, default=None, help="folder for one JSON file per rank")
    parser.add_argument("--plan", type=Path, default=None, help="then train this grid plan as plait run does")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps of --plan")
    parser.add_argument("--metrics", type=Path, default=None, help="--plan's metrics (JSON lines, rank 0)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world, d = dist.get_world_size(), args.depth
    q = math.isqrt(world // d)
    assert q * q * d == world, f"world size {world} is not q*q*{d}"
    grid = make_grid(q, d)
    seqs = 2 * q * d  # two sequences per row of every slice
    torch.manual_seed(0)
    shape = SHAPE
    heads_e, kv_e = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    full = {"norm1": 1 + 0.1 * torch.randn(shape.hidden), "norm2": 1 + 0.1 * torch.randn(shape.hidden),
            "wqkv": 0.2 * torch.randn(shape.hidden, heads_e + 2 * kv_e), "wo": 0.2 * torch.randn(heads_e, shape.hidden),
            "wup": 0.2 * torch.randn(shape.hidden, 2 * shape.ffn), "wdown": 0.2 * torch.randn(shape.ffn, shape.hidden)}
    x = torch.randn(seqs, SEQ, shape.hidden)
    dy = torch.randn(seqs, SEQ, shape.hidden)

    ref = {k: v.clone().requires_grad_(True) for k, v in full.items()}
    x_ref = x.clone().requires_grad_(True)
    y_ref = reference_forward(shape, x_ref, ref)
    (y_ref * dy).sum().backward()

    mine = {k: v.requires_grad_(True) for k, v in grid_blocks(grid, shape, full).items()}
    row = grid.z * q + grid.i
    local = slice(row * 2, row * 2 + 2)

    def block(t: torch.Tensor) -> torch.Tensor:  # this rank's [T, hidden/q] block of a [B, S, hidden] tensor
        return t[local].chunk(q, dim=-1)[grid.j].reshape(-1, shape.hidden // q)

    x_mine = block(x).clone().requires_grad_(True)
    y = layer_forward(grid, shape, 2, x_mine, mine)
    forward = dict(grid.counted)
    grid.counted.clear()
    (y * block(dy)).sum().backward()
    reduce_weight_grads(grid, mine)
    backward = dict(grid.counted)

    ref_grads = grid_blocks(grid, shape, {k: v.grad for k, v in ref.items()})
    y = y.detach()
    diffs = [float((y - block(y_ref.detach())).abs().max()), float((x_mine.grad - block(x_ref.grad)).abs().max())]
    diffs += [float((mine[k].grad - ref_grads[k]).abs().max()) for k in mine]
    fwd_pred, bwd_pred = _predicted(q, d, seqs)
    result = {"rank": dist.get_rank(), "max_diff": max(diffs),
              "forward": {f"{g}/{k}": v for (g, k), v in forward.items()}, "forward_predicted": fwd_pred,
              "backward": {f"{g}/{k}": v for (g, k), v in backward.items()}, "backward_predicted": bwd_pred}
    line = json.dumps(result, sort_keys=True)
    if args.out is not None:
        (args.out / f"rank{dist.get_rank()}.json").write_text(line)
    else:
        print(line)
    if args.plan is not None:  # the worker's path (plait.run.worker.main) in this process group
        config = WorkerConfig(plan=args.plan, steps=args.steps, metrics=args.metrics)
        run_job(config, *prepare(config))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
