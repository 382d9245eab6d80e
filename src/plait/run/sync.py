"""Data-parallel synchronization methods on PyTorch's own pieces, and a count of what they send.

- ``allreduce``: DDP with ``default_hooks.allreduce_hook`` (the reducer's own all-reduce, in Python where it can
  be counted);
- ``bf16``/``fp16``: DDP with ``bf16_compress_hook``/``fp16_compress_hook``. DDP refuses the bf16 hook *by name*
  off CUDA/NCCL (``DDP._check_comm_hook``); called from a hook of another name it runs on gloo the same;
- ``powersgd``: DDP with ``powerSGD_hook`` and error feedback, in one bucket (gloo hangs with several buckets
  at the first compressed step; docs/research/sync-methods.md);
- ``topk``, ``quantize``: DDP hooks with error feedback on ``all_gather_into_tensor`` (:mod:`plait.run.compress`;
  no library has them);
- ``local_sgd``: no gradient synchronization; ``PostLocalSGDOptimizer`` with a ``PeriodicModelAverager``
  averages the parameters every H steps (from the first);
- ``diloco``: no gradient synchronization; :class:`DiLoCo` keeps an fp32 outer copy of the parameters, and after
  every H inner steps all-reduces the pseudo-gradient ``outer - local`` (mean over the ranks) and steps the outer
  copy with SGD and Nesterov momentum, which the replicas then take (Douillard et al. 2023, Algorithm 1). torchft
  ships DiLoCo too, but only under its ``Manager`` and a lighthouse server (docs/research/sync-methods.md); this
  is the same algorithm on a plain process group;
- ``dreamddp``: no gradient synchronization; :class:`DreamDDP` averages, at each step, the parameters of the
  layers :mod:`plait.plan.partial` schedules then, each all-reduce launched asynchronously from the gradient hook of
  its parameter in the last micro-batch's backward (as the artifact's ``register_post_accumulate_grad_hook``), and
  waits for them before the optimizer step (Tang et al., arXiv 2502.11058; no library has it);
- over tensor-parallel or pipeline-stage replicas, which DDP does not take, the compressing methods run the same
  hooks on each rank's local gradients (:mod:`plait.run.replica_grads`), and the others as above on each rank's
  shards;
- ``crossbow``: no DDP; :class:`plait.run.crossbow.Learners` holds the rank's learners and
  :class:`plait.run.crossbow.Crossbow` averages them with every rank's (synchronous model averaging);
- ``pipe_sgd``: no DDP; :class:`PipeSGD` starts each step's all-reduce and applies the previous step's (Li et al.
  2018, pipeline width 2): no library has it.

Each method picks its own piece: :func:`wrap_optimizer` hands it :class:`_Optimizers`, one hook per family
(:class:`plait.sync.hooks.OptimizerHooks`; why a method picks rather than a table keyed by class: that module).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from plait import sync as methods
from plait.cost.partial_times import UnitProfile
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.hardware.mixed_catalog import mixed_cluster
from plait.plan.partial import schedule, unit_of
from plait.run.local import is_dtensor, local_tensor
from plait.run.outer_loop import PALSGD, DiLoCo, averaged
from plait.run.replica_grads import LocalGradients, comm_hook, shard_gradients_like_parameters
from plait.run.sites import Reducer, SiteReducer
from plait.run.wrapped import Wrapped
from plait.sync import MODELLED, SyncMethod
from plait.workload.tensors import Shape

ONE_BUCKET_MB = 1024.0
"""DDP bucket size that puts a small or mid-sized model's gradients in one bucket (PowerSGD on gloo)."""


def wrap_model(model: nn.Module, sync: SyncMethod, replicas: Reducer | None = None, split: bool = False,
               **ddp_options: object) -> nn.Module:
    """The module to train for ``sync`` over the ``replicas`` (``None``: the default group, flat): DDP with the
    method's communication hook (:func:`plait.run.replica_grads.comm_hook`), or the model itself where the optimizer
    synchronizes (local SGD and the other parameter-averaging methods, Pipe-SGD) or where the replicas are
    ``split`` by TP or PP, which DDP does not take (:class:`plait.run.replica_grads.LocalGradients` reduces)."""
    replicas = replicas or Reducer()
    if sync.whole_learners and not split:  # Crossbow: K learners in this rank (plait.run.crossbow)
        from plait.run.crossbow import Learners

        return Learners(model, sync.learners)
    if split or sync.infrequent or sync.pipelined or sync.aggregating:
        return model
    if sync.one_bucket:
        ddp_options["bucket_cap_mb"] = ONE_BUCKET_MB
    if not (sync.is_allreduce or sync.compressed):
        raise ConfigError(f"dp_sync={sync.spec!r} does not run yet (runs: {', '.join(MODELLED)})")
    ddp = DistributedDataParallel(model, process_group=replicas.group, **ddp_options)  # type: ignore[arg-type]
    if sync.is_allreduce and isinstance(replicas, SiteReducer):
        ddp.register_comm_hook(replicas, mean_hook)  # hierarchical across sites
    elif sync.is_allreduce:
        ddp.register_comm_hook(replicas.group, default_hooks.allreduce_hook)  # the reducer's all-reduce, countable
    else:
        ddp.register_comm_hook(*comm_hook(sync, replicas))
    return ddp


def mean_hook(replicas, bucket):  # type: ignore[no-untyped-def]
    """DDP communication hook: the bucket's mean over ``replicas`` (a :class:`Reducer`), as PyTorch's
    ``allreduce_hook`` computes it (divide, then sum) but on the reducer's all-reduce. (Unannotated: DDP checks a
    hook's annotations against the classes themselves.)"""
    buffer = bucket.buffer()
    buffer.div_(replicas.size)
    return replicas.all_reduce(buffer).then(lambda done: done.value()[0])


def named_profile(cluster: str, stride: int, tokens: int) -> UnitProfile | None:
    """DreamDDP's profile on the cluster preset or file ``cluster`` (``None``: none named, or a mixed cluster, whose
    groups differ): :class:`plait.cost.partial_times.UnitProfile`."""
    if not cluster or mixed_cluster(cluster) is not None:
        return None
    return UnitProfile(cluster=resolve_cluster(cluster), stride=stride, tokens=tokens)


def wrap_optimizer(optimizer: torch.optim.Optimizer, sync: SyncMethod, replicas: Reducer | None = None,
                   modules: tuple[nn.Module, ...] = (), whole: list[tuple[str, Shape]] | None = None,
                   accumulations: int = 1, split: bool = False,
                   profile: UnitProfile | None = None) -> torch.optim.Optimizer:
    """The optimizer to step: for local SGD, one that averages the parameters every H steps; for DiLoCo, the
    outer loop around ``optimizer`` (:class:`DiLoCo`); for DreamDDP, :class:`DreamDDP` over the parameters of
    ``modules`` (this rank's parts of the model whose parameters ``whole`` lists; ``accumulations`` backward
    passes per step); for a compressing method over replicas ``split`` by TP or PP, :class:`plait.run.
    replica_grads.LocalGradients` (the training loop calls its ``reduce``). ``replicas``: as :func:`wrap_model`."""
    replicas = replicas or Reducer()
    if split and sync.compressed:
        return LocalGradients(optimizer, sync, replicas)
    if sync.server_ranks:  # servers beyond the workers: not this process group's ranks
        raise ConfigError(f"dp_sync={sync.spec!r} runs its servers on ranks beyond the workers: "
                          "python -m plait.run.async_train starts them")
    return sync.wrap_optimizer(_Optimizers(optimizer, replicas, modules, whole, accumulations, profile))


class _Optimizers:
    """Each family's optimizer around ``optimizer`` (:class:`plait.sync.hooks.OptimizerHooks`; the method picks
    its hook, so no branch here names a method)."""

    def __init__(self, optimizer: torch.optim.Optimizer, replicas: Reducer, modules: tuple[nn.Module, ...],
                 whole: list[tuple[str, Shape]] | None, accumulations: int,
                 profile: UnitProfile | None = None) -> None:
        self.optimizer, self.replicas, self.modules = optimizer, replicas, modules
        self.whole, self.accumulations, self.profile = whole, accumulations, profile

    def plain(self, method: SyncMethod) -> torch.optim.Optimizer:
        """The optimizer itself: DDP (or :mod:`plait.run.replica_grads`) reduces the gradients."""
        return self.optimizer

    def param_server(self, method: methods.ParamServer) -> torch.optim.Optimizer:
        from plait.run.servers import ParamServer  # on point-to-point sends

        return ParamServer(self.optimizer, method, self.replicas, self.modules)

    def switch_aggregation(self, method: methods.SwitchAggregation) -> torch.optim.Optimizer:
        from plait.run.servers import SwitchAggregation  # on point-to-point sends

        return SwitchAggregation(self.optimizer, method, self.replicas)

    def gossip(self, method: methods.Gossip) -> torch.optim.Optimizer:
        from plait.run.gossip import Gossip

        return Gossip(self.optimizer, method, self.replicas)

    def dreamddp(self, method: methods.DreamDDP) -> torch.optim.Optimizer:
        if self.whole is None:
            raise ConfigError("dp_sync='dreamddp' needs the model's parameter list to schedule its layers")
        if method.schedule == "profiled":
            if self.profile is None:
                raise ConfigError(f"dp_sync={method.spec!r} assigns its layers from the cost model's times on a "
                                  "cluster: name one (--cluster)")
            steps = self.profile.steps(self.whole, self.replicas.size, method.every)
        else:
            steps = schedule(self.whole, method.every)
        return DreamDDP(self.optimizer, method.every, self.modules, steps, self.replicas, self.accumulations)

    def diloco(self, method: methods.DiLoCo) -> torch.optim.Optimizer:
        return DiLoCo(self.optimizer, method.every, method.outer_lr, method.outer_momentum, self.replicas)

    def palsgd(self, method: methods.PALSGD) -> torch.optim.Optimizer:
        return PALSGD(self.optimizer, method.every, method.p, method.eta, method.outer_lr, method.outer_momentum,
                      self.replicas, warmup=method.warmup)

    def pipe_sgd(self, method: methods.PipeSGD) -> torch.optim.Optimizer:
        return PipeSGD(self.optimizer, self.replicas)

    def crossbow(self, method: methods.Crossbow) -> torch.optim.Optimizer:
        from plait.run.crossbow import Crossbow, Learners

        learners = [m for m in self.modules if isinstance(m, Learners)]
        if len(learners) != 1:
            raise ConfigError(f"dp_sync={method.spec!r} needs the model wrapped in its learners (plait.run.sync."
                              "wrap_model), whole in one part")
        return Crossbow(self.optimizer, method, learners[0], self.replicas)

    def local_sgd(self, method: methods.LocalSGD) -> torch.optim.Optimizer:
        optimizer, replicas = self.optimizer, self.replicas
        if isinstance(replicas, SiteReducer) or any(is_dtensor(p) for g in optimizer.param_groups
                                                    for p in g["params"]):
            return ShardAverage(optimizer, method.every, replicas)  # HSDP: FSDP2 owns the shards' storage
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        from torch.distributed.optim import PostLocalSGDOptimizer

        averager = PeriodicModelAverager(period=method.every, warmup_steps=0, process_group=replicas.group)
        return PostLocalSGDOptimizer(optimizer, averager)


def attach(model: nn.Module, optimizer: torch.optim.Optimizer, sync: SyncMethod, whole: list[tuple[str, Shape]],
           replicas: Reducer | None = None,
           profile: UnitProfile | None = None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """:func:`wrap_model` and :func:`wrap_optimizer` over the ``replicas`` (``None``: the default process group,
    flat), for the whole ``model`` (whose parameters ``whole`` lists), one backward pass per step."""
    module = wrap_model(model, sync, replicas)  # the learners, for Crossbow; the model itself for the others
    return module, wrap_optimizer(optimizer, sync, replicas, modules=(module if sync.whole_learners else model,),
                                  whole=whole, profile=profile)


class ShardAverage(Wrapped):
    """Local SGD over HSDP replicas, or over replicas in several sites: after steps 0, H, 2H, ...
    (``PeriodicModelAverager``'s) the ``replicas`` average their parameters (shards) in one flat fp32 all-reduce,
    written back in place (PyTorch's averager rebinds ``p.data``, which FSDP2's sharded parameters do not allow, and
    all-reduces flat)."""

    def __init__(self, inner: torch.optim.Optimizer, every: int, replicas: Reducer) -> None:
        super().__init__(inner)
        self.every, self.replicas, self.steps = every, replicas, 0

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        loss = self.inner.step(closure)
        if self.steps % self.every == 0:
            shards = [local_tensor(p) for g in self.param_groups for p in g["params"]]
            for shard, mean in zip(shards, averaged(shards, self.replicas)):
                shard.copy_(mean)
        self.steps += 1
        return loss


class PipeSGD(Wrapped):
    """Pipe-SGD with pipeline width 2 (Li et al. 2018, Algorithm 1): each step's gradient starts its all-reduce
    (one flat fp32 buffer, asynchronous) and the optimizer applies the previous step's mean, so the reduction
    runs while the next step computes; updates are one step stale, and the first step only starts the pipeline."""

    def __init__(self, inner: torch.optim.Optimizer, replicas: Reducer) -> None:
        super().__init__(inner)
        self.replicas = replicas
        self.local = [p for g in inner.param_groups for p in g["params"]]
        self.pending: tuple[torch.Tensor, torch.futures.Future[list[torch.Tensor]]] | None = None

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        shard_gradients_like_parameters(self.local)
        grads = [local_tensor(p.grad) for p in self.local]  # type: ignore[arg-type]
        flat = torch.cat([g.reshape(-1).to(torch.float32) for g in grads])
        loss, previous = None, self.pending
        self.pending = (flat, self.replicas.all_reduce(flat))
        if previous is not None:
            mean, done = previous
            done.wait()
            mean /= self.replicas.size
            for grad, piece in zip(grads, mean.split([g.numel() for g in grads])):
                grad.copy_(piece.view_as(grad))
            loss = self.inner.step(closure)
        return loss


class DreamDDP(Wrapped):
    """DreamDDP's partial local SGD (Tang et al., arXiv 2502.11058): at step ``t`` the parameters of the units that
    ``steps`` (:func:`plait.plan.partial.schedule` or the profiled one) give step ``t mod every`` are averaged over ``replicas``, in place, each by an
    asynchronous sum all-reduce (gloo has no average) that its gradient hook launches once the parameter's last
    gradient of the step has accumulated; :meth:`step` waits for them, divides, then steps ``inner`` — as the
    artifact does: the average of the replicas' pre-step values, then each replica's own update. No extra memory."""

    def __init__(self, inner: torch.optim.Optimizer, every: int, modules: tuple[nn.Module, ...],
                 steps: dict[str, int], replicas: Reducer, accumulations: int = 1) -> None:
        super().__init__(inner)
        self.every, self.replicas, self.steps = every, replicas, 0
        self.accumulations = accumulations
        self.pending: list[tuple[torch.Tensor, torch.futures.Future[list[torch.Tensor]]]] = []
        self.seen: dict[int, int] = {}
        for module in modules:
            for name, p in module.named_parameters():
                p.register_post_accumulate_grad_hook(self._hook(steps[unit_of(name)]))

    def _hook(self, at: int):  # type: ignore[no-untyped-def]
        def launch(p: torch.Tensor) -> None:
            if self.steps % self.every != at:
                return
            count = self.seen[id(p)] = self.seen.get(id(p), 0) + 1
            if count == self.accumulations:  # its last gradient of the step: the backward is done with it
                local = local_tensor(p).data
                self.pending.append((local, self.replicas.all_reduce(local)))
        return launch

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        world = self.replicas.size
        for local, work in self.pending:
            work.wait()
            local /= world
        self.pending, self.seen = [], {}
        self.steps += 1
        return self.inner.step(closure)
