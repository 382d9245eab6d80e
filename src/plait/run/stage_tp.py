"""``plait run`` of a pipeline whose stages differ in tensor-parallel degree (:attr:`Plan.stage_tp`).

Legend of shape suffixes: B micro-batch sequences, S sequence, D model width.

Stage ``s`` holds the consecutive ranks ``sum(stage_tp[:s]) ..`` (``stage_tp[s]`` of them, the cost model's layout,
:func:`plait.cost.per_stage.boundary_p2p_s`); they are its TP group, on which DTensor's Colwise/RowwiseParallel
shard its layers as for a uniform plan (:func:`plait.run.parallel.apply_tp_on`, a mesh from the stage's process
group). torch.distributed.pipelining's ``PipelineStage`` sends over one group with one rank per stage; stages of
unequal degree have none, so the boundary is sent here with point-to-point send/recv, as Megatron's scatter/gather
optimisation does (Narayanan et al., SC 2021, Sec. 4.1): the ``k = min(a, b)`` first ranks of the two stages pair
up, each pair carrying ``1/k`` of the activation (every rank of a stage holds all of it: no sequence parallelism),
and the receiving stage broadcasts the pieces over its own group (Megatron's all-gather). Gradients go back the same
way. The order is GPipe's (Huang et al. 2019): every micro-batch forward, then every backward, last first; a
schedule changes when the work runs, not its sums. Clipping takes the norm over all stages, each stage's squared
norm counted once (DTensor completes it over the stage's TP group). The loss is the one-process run's: every
micro-batch's mean token cross-entropy over the micro-batch count.

Scope (:func:`check_stage_tp`): ``dp = cp = 1``, no sequence parallelism, one model chunk per rank, dense models;
the options of :func:`check_stage_tp_options` are refused.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import LambdaLR

from plait.errors import ConfigError
from plait.plan.per_stage import stage_tp_refusal
from plait.plan.plan import Plan
from plait.run import data
from plait.run.model import build_model
from plait.run.optim import optimizer_recipe
from plait.run.parallel import apply_recompute, apply_tp_on
from plait.run.pipeline import stage_layers
from plait.run.train import (
    NonFiniteStep,
    StepMetrics,
    TrainConfig,
    _foreach_groups,
    _squared_grad_norm,
    autocast,
    cross_entropy,
    lr_lambda,
    micro_batches,
    peak_memory_bytes,
    reduce_partial_gradients,
    timed,
    write_metrics,
)
from plait.run.worker_config import WorkerConfig, whole_loop_option
from plait.workload.model import ModelSpec


def check_stage_tp(plan: Plan, model: ModelSpec) -> None:
    """Refuse what this loop does not implement, naming the option (:func:`plait.plan.per_stage.stage_tp_refusal`)."""
    refusal = stage_tp_refusal(plan, model)
    if refusal:
        raise ConfigError(refusal)


def check_stage_tp_options(args: WorkerConfig) -> None:
    """Refuse the ``plait run`` options this loop does not implement."""
    option = whole_loop_option(args)
    if option:
        raise ConfigError(f"{option} with stage_tp: plait's stage-TP loop (plait/run/stage_tp.py) does not "
                          "implement it (stage_layers goes in the plan)")


def stage_ranks(plan: Plan) -> list[list[int]]:
    """The ranks of every stage: consecutive, ``stage_tp[s]`` of them."""
    out, start = [], 0
    for degree in plan.stage_tp:
        out.append(list(range(start, start + degree)))
        start += degree
    return out


def hand_over(x: torch.Tensor | None, senders: list[int], receivers: list[int], group: dist.ProcessGroup | None,
              shape: tuple[int, ...]) -> torch.Tensor | None:
    """``x`` (held whole by every sender) to every receiver: the first ``min`` ranks pair up, each sending its
    ``1/min`` piece, then the receivers broadcast the pieces over their ``group`` (Sec. 4.1's scatter/gather).
    Returns the tensor on a receiver, ``None`` elsewhere."""
    rank, k = dist.get_rank(), min(len(senders), len(receivers))
    base, extra = divmod(math.prod(shape), k)  # tensor_split's piece lengths: the first `extra` one longer
    sizes = [base + (i < extra) for i in range(k)]
    if rank in senders[:k]:
        assert x is not None
        dist.send(x.detach().float().reshape(-1).tensor_split(k)[senders.index(rank)].contiguous(),
                  dst=receivers[senders.index(rank)])
    if rank not in receivers:
        return None
    pieces = [torch.empty(n) for n in sizes]
    if rank in receivers[:k]:
        dist.recv(pieces[receivers.index(rank)], src=senders[receivers.index(rank)])
    if group is not None:
        for i in range(k):
            dist.broadcast(pieces[i], src=receivers[i], group=group)
    return torch.cat(pieces).view(shape)


def run_stage_tp(args: WorkerConfig, plan: Plan, spec: ModelSpec, device: str) -> int:
    """Train ``spec`` for ``args.steps`` steps; the last stage's first rank reports."""
    if device == "cuda":
        raise ConfigError("stage_tp runs on CPU gloo ranks (plait/run/stage_tp.py sends host tensors)")
    ranks = stage_ranks(plan)
    if dist.get_world_size() != plan.num_gpus:
        raise ConfigError(f"stage_tp={list(plan.stage_tp)} needs sum(stage_tp)={plan.num_gpus} ranks, "
                          f"{dist.get_world_size()} were started")
    groups = [dist.new_group(r) if len(r) > 1 else None for r in ranks]  # every rank creates every group, in order
    rank = dist.get_rank()
    stage = next(s for s, r in enumerate(ranks) if rank in r)
    last = plan.pp - 1
    own = plan.for_stage(stage)
    torch.manual_seed(args.seed)
    model = build_model(spec, plan.seq_len, args.seed, stage_layers(spec.num_layers, plan.pp, plan.stage_layers)[stage],
                        first=stage == 0, last=stage == last)
    if groups[stage] is not None:
        from torch.distributed.device_mesh import DeviceMesh

        apply_tp_on(model, DeviceMesh.from_group(groups[stage], "cpu"), own)
    apply_recompute(model, own)
    config = TrainConfig(steps=args.steps, lr=args.lr, seed=args.seed, on_nonfinite=args.on_nonfinite)
    params = list(model.parameters())
    optimizer_class, kwargs = optimizer_recipe(plan.optimizer, config)
    optimizer = optimizer_class(params, **kwargs)
    scheduler = LambdaLR(optimizer, lr_lambda(config))
    if args.dry_run:
        if rank == 0:
            print(f"dry run ok: {plan.describe()} on {plan.num_gpus} ranks, stages {ranks}")
        return 0
    for step in range(args.steps):
        start = timed()
        inputs, targets = data.global_batch(step, plan.global_batch, plan.seq_len)
        loss = _forward_backward(model, micro_batches(inputs, targets, plan.micro_batch), plan, own, stage, ranks,
                                 groups, args.full_precision)
        reduce_partial_gradients(params)
        squared = _squared_grad_norm([p for p in params if p.grad is not None])  # the stage's, on each of its ranks
        counted = squared.detach().float().clone() if rank == ranks[stage][0] else torch.zeros(())
        dist.all_reduce(counted)  # each stage's squared norm once
        norm = math.sqrt(float(counted))
        if not math.isfinite(norm) and config.on_nonfinite == "stop":
            raise NonFiniteStep(f"step {step + 1}: the gradient norm is {norm}; the run stops")
        if math.isfinite(norm):
            for group in _foreach_groups([p for p in params if p.grad is not None]):
                torch.nn.utils.clip_grads_with_norm_(group, config.max_grad_norm, torch.tensor(norm))
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed = timed() - start
        if rank == ranks[last][0]:
            tokens = plan.global_batch * plan.seq_len
            write_metrics(args.metrics, StepMetrics(step + 1, loss, norm, elapsed, tokens / elapsed,
                                                    peak_memory_bytes(), started_s=start))
            print(f"step {step + 1}: loss {loss:.6f} grad-norm {norm:.4f} {elapsed:.3f} s", file=sys.stderr)
    return 0


def _forward_backward(model, chunks, plan: Plan, own: Plan, stage: int, ranks: list[list[int]],  # type: ignore[no-untyped-def]
                      groups: list[dist.ProcessGroup | None], full_precision: bool) -> float:
    """GPipe's order over this stage's micro-batches; returns the step's mean loss on the last stage (0 elsewhere)."""
    last, m = plan.pp - 1, len(chunks)
    shape = (plan.micro_batch, plan.seq_len, model.spec.hidden_size)
    kept: list[tuple[torch.Tensor | None, torch.Tensor]] = []  # (this stage's input, its output or loss)
    total = 0.0
    for x_BS, y_BS in chunks:
        h_BSD = None
        if stage > 0:
            h_BSD = hand_over(None, ranks[stage - 1], ranks[stage], groups[stage], shape)
            assert h_BSD is not None
            h_BSD.requires_grad_(True)
        with autocast(own, full_precision, "cpu"):
            out = model(x_BS if stage == 0 else h_BSD)
            if stage == last:
                out = cross_entropy(out, y_BS) / m
                total += float(out.detach())
        if stage < last:
            hand_over(out, ranks[stage], ranks[stage + 1], groups[stage + 1], shape)
        kept.append((h_BSD, out))
    for h_BSD, out in reversed(kept):
        if stage == last:
            out.backward()
        else:
            grad = hand_over(None, ranks[stage + 1], ranks[stage], groups[stage], shape)
            out.backward(grad.to(out.dtype))  # type: ignore[union-attr]
        if stage > 0:
            assert h_BSD is not None and h_BSD.grad is not None
            hand_over(h_BSD.grad, ranks[stage], ranks[stage - 1], groups[stage - 1], shape)
    return total
