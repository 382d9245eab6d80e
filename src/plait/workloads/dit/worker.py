"""Parallel DiT inference on torch.distributed: a small DiT (:mod:`plait.workloads.dit.tiny_model`) denoises an
image on the ranks of a named mesh ``cfg x pipefusion x distrifusion x ring x ulysses x tp`` (tp innermost), each
rank counting the bytes it sends:

- ``cfg``: the conditional and unconditional passes on the two halves, their velocities all-gathered each step
  (xDiT's CFG parallel: Fang et al., arXiv 2411.01738, Sec. 4.1);
- ``ulysses``, ``ring`` and both (USP): the image's tokens split over the ranks, attention made whole by
  :mod:`plait.workloads.dit.sp_attention`; exact;
- ``tp``: every block split Megatron's way (:mod:`plait.workloads.dit.tensor_parallel`); exact;
- ``distrifusion``: patches attending with the others' stale K, V (:mod:`plait.workloads.dit.stale_kv`), exact
  during the first ``--warmup`` steps;
- ``pipefusion``: layers in stages, the image in ``--patches`` patches (:mod:`plait.workloads.dit.pipefusion`),
  exact during the first ``--warmup`` steps;
- ``--offload 1`` (with the exact methods but TP): the blocks' weights streamed in layer by layer from a host copy
  (:mod:`plait.workloads.dit.layer_offload`, emulated: the bytes and the two resident layers are what is checked).

``--ranks 1`` is the single-process reference. Rank 0 writes the whole denoised latent and each rank's counted
bytes (and, with ``--check``, each stale attention's error beside its bound).

Run: ``python -m torch.distributed.run --nproc-per-node 2 -m plait.workloads.dit.worker --ring 2 --out run.json``.

Tensor legend: ``B`` images, ``S`` this rank's tokens, ``T`` all tokens, ``P`` patch values.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from plait.run.config import read_config
from plait.run.counted import Counted
from plait.run.gloo_job import run_job
from plait.run.ring_attention import Ring
from plait.run.workload_configs import DitConfig
from plait.workloads.dit.layer_offload import LayerOffload
from plait.workloads.dit.pipefusion import Stage, pipefusion_denoise
from plait.workloads.dit.sp_attention import ring_attention, ulysses_attention
from plait.workloads.dit.stale_kv import StaleKV
from plait.workloads.dit.tensor_parallel import TpBlock
from plait.workloads.dit.tiny_model import Attend, TinyDiT, Velocity, denoise, guide, local_attention, velocity

AXES = ("cfg", "pipefusion", "distrifusion", "ring", "ulysses", "tp")


def run(args: DitConfig) -> dict[str, object]:
    tokens = args.side * args.side
    values = args.patch * args.patch * args.channels
    model = TinyDiT(args.hidden, args.heads, args.layers, values, tokens, seed=args.seed).eval()
    gen = torch.Generator().manual_seed(args.seed + 1)
    noise_BTP = torch.randn(args.batch, tokens, values, generator=gen)
    labels_B = torch.arange(args.batch) % 10
    if args.ranks == 1:
        v = velocity(model, labels_B, slice(None), guidance=args.guidance)
        return {"latent": denoise(v, noise_BTP, args.steps).tolist()}
    mesh = init_device_mesh("cpu", tuple(getattr(args, axis) for axis in AXES), mesh_dim_names=AXES)
    counter, ring = Counted(), Ring(mesh.get_group("ring")) if args.ring > 1 else None
    cfg_group = mesh.get_group("cfg") if args.cfg > 1 else None
    errors: list[tuple[float, float]] = []
    offload = None
    if args.pipefusion > 1:
        pp_ranks = [int(r) for r in mesh["pipefusion"].mesh.tolist()]
        stage = Stage(pp_ranks, cfg_group, mesh.get_local_rank("cfg"), args.guidance, args.check,
                      mesh.get_group("ulysses") if args.ulysses > 1 else None, ring)
        out = pipefusion_denoise(model, noise_BTP, labels_B, args.steps, args.warmup, args.patches, stage, counter)
        errors = stage.errors
        held = stage.held(0, 1, args.patches, tokens)
        if out is not None and stage.cfg_rank == 0:
            out = out[:, held]
        else:
            held, out = None, None
    else:
        share = args.distrifusion * args.ring * args.ulysses
        shard = (mesh.get_local_rank("distrifusion") * args.ring + mesh.get_local_rank("ring")) * args.ulysses \
            + mesh.get_local_rank("ulysses")
        mine = slice(shard * tokens // share, (shard + 1) * tokens // share)
        held = torch.arange(tokens)[mine]
        if args.tp > 1:
            tp_group = mesh.get_group("tp")
            model.blocks = nn.ModuleList(TpBlock(block, mesh.get_local_rank("tp"), args.tp,
                                                 lambda x: counter.all_reduce(x, tp_group),
                                                 lambda x: _gather(counter, x, tp_group)) for block in model.blocks)
        stale = None
        if args.distrifusion > 1:
            stale = StaleKV(counter, args.layers, args.steps, args.warmup, args.check, mesh.get_group("distrifusion"))
            attend: Attend = stale.attend
        else:
            attend = ring_attention(ring) if ring is not None else local_attention
            if args.ulysses > 1:
                attend = ulysses_attention(counter, mesh.get_group("ulysses"), attend)
        v = _cfg_velocity(model, labels_B, mine, attend, args.guidance, cfg_group, counter)
        offload = LayerOffload(model.blocks, runs=args.steps) if args.offload else None  # one forward a step
        out = denoise(v, noise_BTP[:, mine], args.steps, stale.on_step if stale else None)
        if offload is not None:
            offload.close()
        errors = stale.errors if stale else []
        if (args.cfg > 1 and mesh.get_local_rank("cfg")) or (args.tp > 1 and mesh.get_local_rank("tp")):
            held = None  # a copy another rank reports
    result = _collect(out, held, tokens, counter.sent + (ring.sent_bytes if ring else 0), errors, args.check)
    if offload is not None:
        streamed: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(streamed, (offload.streamed_bytes, offload.peak_loaded))
        result["streamed_bytes"] = [s[0] for s in streamed]  # type: ignore[index]
        result["peak_loaded_layers"] = [s[1] for s in streamed]  # type: ignore[index]
    return result


def _gather(counter: Counted, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    whole = torch.empty(dist.get_world_size(group), *x.shape)
    counter.all_gather(whole.view(-1, *x.shape[1:]), x, group=group)
    return whole


def _cfg_velocity(model: TinyDiT, y_B: torch.Tensor, positions: slice, attend: Attend, guidance: float,
                  cfg_group: dist.ProcessGroup | None, counter: Counted) -> Velocity:
    """The guided velocity; under CFG parallel this rank runs one pass and all-gathers the other's."""
    if cfg_group is None:
        return velocity(model, y_B, positions, attend, guidance)
    labels = y_B if dist.get_rank(cfg_group) == 0 else torch.full_like(y_B, model.null_class)

    def v(x_BSP: torch.Tensor, t_B: torch.Tensor) -> torch.Tensor:
        mine = model(x_BSP, t_B, labels, positions, attend).contiguous()
        both = torch.empty(2 * mine.shape[0], *mine.shape[1:])
        counter.all_gather(both, mine, group=cfg_group)
        return guide(*both.chunk(2), guidance)
    return v


def _collect(out: torch.Tensor | None, held: torch.Tensor | None, tokens: int, sent: int,
             errors: list[tuple[float, float]], check: bool) -> dict[str, object]:
    """The latent from the ranks that report the tokens they hold (``held``: positions, None: a copy), every
    rank's bytes."""
    world = dist.get_world_size()
    parts: list[object] = [None] * world
    mine = (held.tolist(), out.tolist()) if held is not None and out is not None else None
    dist.all_gather_object(parts, (mine, sent, errors))
    pieces = [p[0] for p in parts if p[0] is not None]  # type: ignore[index]
    latent = torch.empty(len(pieces[0][1]), tokens, len(pieces[0][1][0][0]))
    covered = torch.zeros(tokens, dtype=torch.bool)
    for positions, values in pieces:
        latent[:, positions] = torch.tensor(values)
        covered[positions] = True
    assert bool(covered.all()), "every token's latent is reported"
    result: dict[str, object] = {"latent": latent.tolist(), "bytes_sent": [p[1] for p in parts]}  # type: ignore[index]
    if check:
        result["attention_errors"] = [p[2] for p in parts]  # type: ignore[index]
    return result


def main(argv: list[str] | None = None) -> int:
    args = read_config(DitConfig, argv, prog="plait.workloads.dit.worker", description=__doc__)
    return run_job(args.out, args.ranks == 1, lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
