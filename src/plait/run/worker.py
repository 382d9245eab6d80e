"""One rank of ``plait run`` (started by torchrun): build, parallelise, train, report.

Usage (normally through ``plait run``, which writes the rank's :class:`plait.run.worker_config.WorkerConfig`):
    torchrun --nproc-per-node N -m plait.run.worker --config run.json
    torchrun --nproc-per-node N -m plait.run.worker --plan plan.toml [--steps 10] [--metrics m.jsonl]
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.distributed as dist

from plait.errors import ConfigError
from plait.plan.io import read_plan_parts
from plait.plan.mixed import per_stage_plan, replica_micro_batches
from plait.plan.per_stage import stage_tp_differs
from plait.run import checkpoint, data
from plait.run.checkpoint_room import check_options
from plait.run.chunked_tp import sent_bytes
from plait.run.config import read_config
from plait.run.context import average_over_cp, cp_sent_bytes, mean_over_cp, train_context
from plait.run.counting import counted_bytes
from plait.run.lifecycle import die_with_parent, exit_without_teardown
from plait.run.loss_scale import LossScale
from plait.run.mesh import Mesh, device_type
from plait.run.moe import expert_parameters, reduce_expert_gradients
from plait.run.parallel import replica_group
from plait.run.pipeline import build_schedule
from plait.run.rank_setup import Rank, set_up_rank
from plait.run.replica_grads import reduce_gradients
from plait.run.stage_tp import check_stage_tp_options, run_stage_tp
from plait.run.support import check_runnable
from plait.run.swap import NOTHING_MOVES, ActivationSwap
from plait.run.tp2d_train import check_grid_options, run_grid
from plait.run.train import (
    FAIL_HOOK,
    NonFiniteStep,
    StepMetrics,
    TrainConfig,
    agreed_norm,
    autocast,
    clip_gradients,
    cross_entropy,
    gather_once,
    mean_over_dp,
    micro_batches,
    nan_hook_fires,
    peak_memory_bytes,
    reduce_partial_gradients,
    sync_context,
    timed,
    write_metrics,
)
from plait.run.uneven import Uneven, check_rounds, check_uneven, loss_weight, rank_rows
from plait.run.worker_config import WorkerConfig
from plait.workload.catalog import resolve_model


def main(argv: list[str] | None = None) -> int:
    die_with_parent(os.getppid())  # a rank never outlives torchrun (plait.run.lifecycle)
    args = read_config(WorkerConfig, argv, prog="plait.run.worker", description=__doc__)
    job, plan, spec, device, uneven = prepare(args)
    # On CUDA, NCCL for device tensors and gloo for the few host scalars (loss and norm logging), as torchtitan does.
    dist.init_process_group("cuda:nccl,cpu:gloo" if device == "cuda" else "gloo", **_attempt_store())
    try:
        code = run_job(args, job, plan, spec, device, uneven)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return code


def prepare(args: WorkerConfig):  # type: ignore[no-untyped-def]
    """The job, plan, model, device and uneven options of ``args``, checked before any process group exists."""
    check_options(args.checkpoint_dir, args.resume, args.checkpoint_at, args.checkpoint_every)
    job, plan, mixed = read_plan_parts(args.plan)  # a mixed plan file's shares arrive as the uneven options
    spec = resolve_model(job.model)
    plan = plan.with_seq_len(spec.seq_len)
    if mixed is not None:  # groups at their own TP degree: each stage's layers from the shares, in the plan
        plan = per_stage_plan(replace(mixed, plan=plan))
    device = device_type()
    check_runnable(plan, spec, on_gpu=device == "cuda")
    if spec.vocab_size < data.VOCAB_SIZE:
        raise ConfigError(f"vocab_size={spec.vocab_size} must be >= {data.VOCAB_SIZE} (byte tokens)")
    uneven = args.uneven
    check_uneven(uneven, plan, spec.num_layers, replica_micro_batches(mixed))
    check_rounds(args.steps, plan, uneven, checkpointing=args.checkpoint_dir is not None)
    if plan.tp_mode != "1d":
        check_grid_options(args)
    if stage_tp_differs(plan):
        check_stage_tp_options(args)
    return job, plan, spec, device, uneven


def run_job(args: WorkerConfig, job, plan, spec, device: str, uneven: Uneven) -> int:  # type: ignore[no-untyped-def]
    """Train in the initialised process group."""
    if plan.tp_mode != "1d":  # a 2-D/2.5-D tensor-parallel grid: its own loop
        return run_grid(args, plan, spec, device)
    if stage_tp_differs(plan):  # stages of unequal TP degree: their own loop
        return run_stage_tp(args, plan, spec, device)
    return _run(args, job, plan, spec, device, uneven)


def _restart_count() -> int:
    """How many times torchrun's elastic agent has restarted the ranks after a failure (0: the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def _attempt_store() -> dict[str, object]:
    """After a restart by torchrun, the process group's keys under a prefix of this attempt: the agent's store
    still holds the failed attempt's gloo addresses, and a rank that read a dead peer's address first timed out
    (``connectFullMesh ... Connection refused``, measured in 1 of 3 restarts here without the prefix)."""
    restart = _restart_count()
    if not restart:
        return {}
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    hosted_by_rank0 = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"  # else torchrun's agent hosts it
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=hosted_by_rank0 and rank == 0)
    return {"store": dist.PrefixStore(f"plait/attempt-{restart}", store), "rank": rank, "world_size": world}


def _run(args: WorkerConfig, job, plan, spec, device: str, uneven: Uneven) -> int:  # type: ignore[no-untyped-def]
    """Train this rank's part of ``plan`` for ``args.steps`` steps (or check it with ``--dry-run``)."""
    rank = set_up_rank(args, job, plan, spec, device, uneven)
    plan = rank.plan
    if args.checkpoint_dir is not None:
        checkpoint.check_optimizer(rank.optimizer)  # before the first step, not at the first save
    if args.dry_run:
        if dist.get_rank() == 0:
            print(f"dry run ok: {plan.describe()} on {dist.get_world_size()} ranks, mesh {rank.mesh.mesh}, "
                  f"stages per rank {rank.stage_ids}")
        return 0
    identity = checkpoint.RunIdentity(plan=plan.to_dict(), model=spec.name, steps=rank.steps, seed=args.seed)
    saver = checkpoint.Saver(args.checkpoint_dir, identity, args.keep, background=args.async_save) \
        if args.checkpoint_dir is not None else None
    start_step = _resume(args, identity, rank)
    schedule = _pipeline_schedule(rank, device)
    weight = loss_weight(uneven.batch_split, rank.mesh.dp_rank, plan.global_batch, plan.dp, plan.dp_sync.is_allreduce)
    swap = ActivationSwap(rank.parts, device, layers=plan.swap_layers) if plan.swap_activations else None
    if swap is not None and not swap.moves and dist.get_rank() == 0:
        print(f"plait: {NOTHING_MOVES}", file=sys.stderr)
    for step in range(start_step, rank.steps):
        _one_step(args, rank, uneven, schedule, step, weight=weight, swap=swap, device=device)
        every = args.checkpoint_every
        if saver is not None and (args.checkpoint_at == step + 1 or every and (step + 1) % every == 0):
            saver.save(rank.container, rank.optimizer, step + 1, rank.scaling)
    if saver is not None:
        saver.wait()
    return 0


def _resume(args: WorkerConfig, identity: checkpoint.RunIdentity, rank: Rank) -> int:
    """The step to start from: 0, or with ``--resume`` (or after a restart by torchrun, whose attempt continues
    from the newest valid checkpoint) the saved one's, its weights, optimizer and schedule restored."""
    restart = _restart_count()
    saved = args.checkpoint_dir
    if not (args.resume or bool(restart and saved is not None and checkpoint.published(saved))):
        return 0
    folder = checkpoint.choose_on_rank0(args.checkpoint_dir, identity, args.reshard)
    start_step = checkpoint.load(folder, rank.container, rank.optimizer, rank.scaling)
    if dist.get_rank() == 0:  # plait.run.lifecycle shows this line on the terminal
        after = f" after restart {restart}" if restart else ""
        print(f"plait: resumed{after} from {folder} at step {start_step} of {args.steps}", file=sys.stderr)
    for _ in range(start_step):
        rank.scheduler.step()
    return start_step


def _pipeline_schedule(rank: Rank, device: str):  # type: ignore[no-untyped-def]
    """torch.distributed.pipelining's schedule over this rank's stages; None without pipelining."""
    plan = rank.plan
    if plan.pp == 1:
        return None
    from torch.distributed.pipelining import PipelineStage

    num_stages = plan.pp * plan.vpp
    stages = [PipelineStage(part, stage, num_stages, torch.device(device), group=rank.mesh.sub("pp").get_group())
              for part, stage in zip(rank.parts, rank.stage_ids)]
    return build_schedule(stages, plan, rank.loss_fn, plan.num_micro_batches)


def _one_step(args: WorkerConfig, rank: Rank, uneven: Uneven, schedule, step: int, *,  # type: ignore[no-untyped-def]
              weight: float, swap: ActivationSwap | None, device: str) -> None:
    """Optimizer step ``step`` (0-based), timed, its bytes counted, its metrics written by the reporting rank."""
    plan, mesh = rank.plan, rank.mesh
    start = timed()
    inputs, targets = data.global_batch(step, plan.global_batch, plan.seq_len)
    rows = slice(*rank_rows(uneven.batch_split, mesh.dp_rank, plan.global_batch, plan.dp))
    inputs, targets = inputs[rows].to(device), targets[rows].to(device)
    if plan.cp > 1:  # context parallelism shards them in place: they must own their storage
        inputs, targets = inputs.clone(), targets.clone()
    profiling = args.trace_dir is not None and step == rank.steps - 1
    profiler = _profiler(device) if profiling else contextlib.nullcontext()
    if os.environ.get(FAIL_HOOK) == str(step + 1) and not _restart_count() and dist.get_rank() == 1:
        os._exit(5)  # test hook: one rank dies in the first attempt
    cp_before, tp_before = cp_sent_bytes(mesh), sent_bytes(rank.parts)
    with profiler as prof, _sync_counter(plan, mesh) as sent:
        loss, norm = train_step(rank.parts, schedule, mesh, plan, rank.params, rank.optimizer, rank.scheduler,
                                rank.config, inputs, targets, args.full_precision, device, step,
                                loss_fn=rank.loss_fn, weight=weight, uneven_batch=rank.counts_differ, swap=swap,
                                scaling=rank.scaling)
    elapsed = timed() - start
    cp_after = cp_sent_bytes(mesh)
    cp_bytes = None if cp_after is None else cp_after - (cp_before or 0)
    tp_after = sent_bytes(rank.parts)  # overlap_chunks > 1: the chunked blocks' collectives in the step
    tp_sent = tp_after and tp_before and (tp_after[0] - tp_before[0], tp_after[1] - tp_before[1])
    if profiling:
        args.trace_dir.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(args.trace_dir / f"rank{dist.get_rank()}.json"))
    if mesh.is_last_stage_rank:  # per-rank local steps: ranks step apart, each logs its own replica's loss
        loss = mean_over_cp(loss if uneven.local_steps else mean_over_dp(loss, mesh), mesh)
    if mesh.is_last_stage_rank and mesh.dp_rank == 0 and mesh.coordinate("tp") == 0 and mesh.coordinate("cp") == 0:
        tokens = plan.global_batch * plan.seq_len
        write_metrics(args.metrics, StepMetrics(step + 1, loss, norm, elapsed, tokens / elapsed, peak_memory_bytes(),
                                                sent[0] if sent else None, cp_bytes, start,
                                                None if swap is None else swap.packed_bytes,
                                                None if swap is None else swap.layer_bytes,
                                                tp_sent and tp_sent[1], tp_sent and tp_sent[0]))
        print(f"step {step + 1}: loss {loss:.6f} grad-norm {norm:.4f} {elapsed:.3f} s", file=sys.stderr)


def _sync_counter(plan, mesh: Mesh) -> contextlib.AbstractContextManager[list[int]]:  # type: ignore[no-untyped-def]
    """Counts the payload bytes of the step's replica synchronization (:func:`plait.run.counting.counted_bytes`) for
    plans with a ``dp_sync`` method; yields an empty list for the others (DDP's reducer reduces in C++)."""
    if plan.dp_sync.is_allreduce or plan.dp == 1:
        return contextlib.nullcontext([])
    return counted_bytes(*mesh.replicas.groups)  # type: ignore[arg-type]


def _profiler(device: str):  # type: ignore[no-untyped-def]
    """torch.profiler over one step: CPU ops, and CUDA kernels on a GPU."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    return profile(activities=activities)


def train_step(parts, schedule, mesh: Mesh, plan, params, optimizer, scheduler, config: TrainConfig,  # type: ignore[no-untyped-def]
               inputs, targets, full_precision: bool, device: str, step: int, *,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy,
               weight: float = 1.0, uneven_batch: bool = False,
               swap: ActivationSwap | None = None, scaling: LossScale | None = None) -> tuple[float, float]:
    """Optimizer step ``step`` (0-based): forward and backward of every micro-batch, clipping, the optimizer,
    schedule. Returns (mean loss this rank saw, global gradient norm before clipping; Crossbow: its largest
    learner's own norm, each learner clipped by its own). A non-finite norm stops
    the run or, with ``on_nonfinite = "skip"``, leaves the weights as they were. A PALSGD pseudo-synchronization
    step (:class:`plait.run.outer_loop.PALSGD`) runs no forward or backward pass: its loss and norm are NaN (null in the
    metrics). Under an uneven batch split (``uneven_batch``) ``weight`` is the factor on this rank's loss
    (:func:`plait.run.uneven.loss_weight`) and FSDP2 gathers and reduces once per step (:func:`gather_once`).
    ``swap``: the saved-tensor hooks of ``swap_activations`` (:mod:`plait.run.swap`), counting this step's bytes.
    ``scaling``: fp16's dynamic loss scale, whose ``loss_fn`` is already scaled (:mod:`plait.run.loss_scale`): the
    gradients are unscaled before clipping, and an overflowed step is skipped and the scale halved, whatever
    ``on_nonfinite`` says (an overflow is how the scale learns its ceiling)."""
    if plan.dp_sync.pseudo_steps:  # PALSGD: only these plans import the synchronization methods
        from plait.run.outer_loop import skips_gradient

        if skips_gradient(optimizer):
            optimizer.step()
            scheduler.step()
            return float("nan"), float("nan")
    if swap is not None:
        swap.reset()
    swapping = swap if swap is not None else contextlib.nullcontext()
    with train_context(parts, mesh, inputs, targets), swapping:  # cp > 1: context_parallel shards the sequence
        loss = _step(parts, schedule, mesh, plan, inputs, targets, full_precision, device, loss_fn, weight, uneven_batch)
    if scaling is not None:
        loss /= scaling.scale
    reduce_partial_gradients(params)
    average_over_cp(params, mesh)  # a dp_sync method with cp > 1: the replica's cp ranks agree first
    experts = expert_parameters(parts, plan)  # MoE with ep > 1: not replicated over dp
    reduce_expert_gradients(experts, mesh)
    if not plan.dp_sync.is_allreduce:  # TP/PP replicas: compressed gradients reduced here, not by DDP
        reduce_gradients(optimizer)
    if nan_hook_fires(step):
        for p in params:
            if p.grad is not None:
                p.grad.fill_(float("nan"))
    if scaling is not None:
        scaling.unscale(params)
    if plan.dp_sync.whole_learners and plan.dp > 1:  # Crossbow: each learner by its own norm, as alone
        norm = optimizer.clip(config.max_grad_norm)
    else:
        norm = clip_gradients(params, config.max_grad_norm, mesh, experts)  # the same global norm on every rank
    if scaling is not None:
        scaling.update(math.isfinite(norm))
    if config.on_nonfinite == "skip" and plan.dp > 1 and plan.dp_sync.infrequent:  # each replica's own norm
        norm = agreed_norm(norm, replica_group(mesh), device)
    if not math.isfinite(norm) and config.on_nonfinite == "stop" and scaling is None:
        raise NonFiniteStep(f"step {step + 1}: the gradient norm is {norm}; the run stops "
                            "(--on-nonfinite skip skips such steps)")
    if math.isfinite(norm):
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, norm


def _step(parts, schedule, mesh: Mesh, plan, inputs, targets, full_precision: bool, device: str,  # type: ignore[no-untyped-def]
          loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], weight: float, gather_once_fsdp: bool) -> float:
    """Forward and backward of one optimizer step; returns the mean loss this rank saw times ``weight`` (0 off the
    last stage)."""
    if schedule is not None:
        losses: list[torch.Tensor] = []
        own = plan.for_stage(mesh.coordinate("pp")) if plan.per_stage else plan  # FSDP2 casts where it shards
        with autocast(own, full_precision, device):
            if mesh.is_first_stage_rank:
                schedule.step(inputs, target=targets if mesh.is_last_stage_rank else None, losses=losses)
            elif mesh.is_last_stage_rank:
                schedule.step(target=targets, losses=losses)
            else:
                schedule.step()
        return float(torch.stack(losses).mean()) if losses else 0.0
    model = parts[0]
    chunks = micro_batches(inputs, targets, plan.micro_batch)
    total = 0.0
    for index, (x, y) in enumerate(chunks):
        if gather_once_fsdp:  # uneven micro-batch counts: the same FSDP2 collectives on every rank
            gather_once(model, index == len(chunks) - 1, plan.sharding == "zero3")
        with sync_context(model, index == len(chunks) - 1), autocast(plan, full_precision, device):
            loss = loss_fn(model(x), y) * weight / len(chunks)
            loss.backward()
        total += float(loss.detach())
    return total


if __name__ == "__main__":
    try:
        status = main()
    except ConfigError as exc:
        print(f"plait: error: {exc}", file=sys.stderr)
        status = 2
    except NonFiniteStep as exc:
        print(f"plait: error: {exc}", file=sys.stderr)
        status = 3
    exit_without_teardown(status)
