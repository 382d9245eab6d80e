"""A rank that computes ``f`` times slower than this machine: each stretch of compute is followed by a sleep of
``(f - 1)`` times its length.

The emulated device runs every kernel at ``1/f`` of this device's rate and its host work ``f`` times longer: the
cluster :func:`plait.hardware.mixed.slowed` describes (peaks and memory bandwidth divided by ``f``, host overheads
multiplied by ``f``). A stretch of compute measured with :func:`plait.run.train.timed` (``time.perf_counter``,
after a CUDA synchronize on a GPU; on a CPU the work is synchronous) and followed by ``(f - 1)`` times as long a
sleep ends when that device's stretch would, and what follows it (a send, a gradient bucket's all-reduce, the
next compute) starts when it would.

Why a sleep rather than fewer threads or a busy loop: it is deterministic (the delay is the rank's own measured
work times a constant, not the scheduler's share of a core, which on a shared machine moves with the other ranks'
load), it slows only that rank, and it changes no number the rank computes, so an uneven run's losses can be
compared bit for bit-close with an even run's.

Where the stretches are cut (hooks, so the training loop is the same code with and without a slowdown):

- forward: from the module's forward pre-hook to its forward hook (the inner module under DDP, so DDP's buffer
  broadcast is outside), and the loss, from its call to its return;
- backward: from the arrival of the loss's gradient (or, on a pipeline stage that is not the last, of its
  output's gradient) through each parameter's gradient accumulation (``register_post_accumulate_grad_hook``,
  which runs before DDP's reducer marks the parameter ready, so a bucket's all-reduce starts after the slowed
  compute before it) to the stage input's gradient;
- the optimizer step, between its step pre- and post-hooks.

Not emulated: memory capacity (the slow rank has this machine's memory), the network (collectives and
pipeline sends run at this machine's speed on every rank), and the little work outside those stretches
(gradient clipping's norm, the learning-rate schedule, slicing the batch), which runs at full speed. The base
of each stretch is this rank's speed at the time: ranks that share cores or memory bandwidth compute faster while
the others sleep or wait, so a slowed rank's stretches, often timed while its peers wait for it, can be shorter
than the rates ``plait calibrate`` measures with every rank computing at once (benchmarks/uneven_vs_predict.py).
Under FSDP2 (ZeRO-2/3, ``dp_shard``) the forward and backward hold collectives (each block's parameter all-gather
and gradient reduce-scatter), and FSDP2 runs the sharded parameters' post-accumulate-grad hooks after its reduce-scatter; so a sharded model's
parameters are not hooked, and it is cut at its sharded blocks instead (:func:`_hook_fsdp_blocks`): a block's forward
stretch starts after FSDP2's pre-forward hook (the all-gather) and the stretch before it ends ahead of that hook
(``prepend``), and in the backward a block's stretch runs from the gradient at its output (after FSDP2's
pre-backward all-gather, registered first) to the gradient at its input (before the autograd node FSDP2 put there,
whose backward reduce-scatters). The stretch before a block's backward gather (the loss's and the output head's
backward) ends in a hook registered on the block's (and the root's) output ahead of FSDP2's pre-backward hook, so
ZeRO-3's re-gathers are outside it: a rank that waits there for a peer still running its other micro-batches (an
uneven split, :func:`plait.run.train.gather_once`) must not sleep twice that wait. Not cut out: the embedding's
backward (after the first block's reduce-scatter), which runs unslowed. TP, CP and EP are refused (:func:`plait.run.uneven.check_uneven`): their collectives sit inside each
block.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

from plait.run.local import is_dtensor
from plait.run.train import timed


class Clock:
    """Cuts a rank's time into stretches of compute and sleeps ``(factor - 1)`` times each one."""

    def __init__(self, factor: float) -> None:
        assert factor >= 1.0, "checked by plait.run.uneven.check_uneven"
        self.factor = factor
        self.slept_s = 0.0
        """Total sleep so far, as asked (for reports and tests)."""
        self._start_s = timed()
        self._owed_s = 0.0
        """Sleep asked for but not yet slept (negative: overslept). ``time.sleep`` oversleeps by the timer slack,
        ~70 us a call measured here, and a small model's backward ends ~40 stretches: the excess is carried over."""

    def start(self) -> None:
        """Compute begins (after a wait this rank does not slow: a receive, a collective, the step's end)."""
        self._start_s = timed()

    def tick(self) -> None:
        """The compute since the last :meth:`start` or :meth:`tick` is done: stretch it by ``factor``."""
        extra_s = (self.factor - 1.0) * (timed() - self._start_s)
        self.slept_s += extra_s
        self._owed_s += extra_s
        if self._owed_s > 0:
            before_s = time.perf_counter()
            time.sleep(self._owed_s)
            self._owed_s -= time.perf_counter() - before_s
        self._start_s = timed()


def slow_down(parts: list[nn.Module], last_stage: bool, optimizer: torch.optim.Optimizer,
              loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
              factor: float) -> tuple[Clock, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """Hooks ``parts`` (this rank's model parts, DDP-wrapped or not) and ``optimizer`` so that this rank computes
    ``factor`` times slower; returns the clock and the loss function to train with. ``last_stage``: the last part
    ends in the loss (always so without a pipeline)."""
    clock = Clock(factor)
    for index, part in enumerate(parts):
        inner = part.module if isinstance(part, nn.parallel.DistributedDataParallel) else part
        _hook_module(inner, clock, ends_in_loss=last_stage and index == len(parts) - 1)
        _hook_fsdp_blocks(inner, clock, ends_in_loss=last_stage and index == len(parts) - 1)
    optimizer.register_step_pre_hook(lambda *_: clock.start())
    optimizer.register_step_post_hook(lambda *_: clock.tick())

    def slowed_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        clock.start()
        loss = loss_fn(logits, targets)
        clock.tick()
        loss.register_hook(lambda _: clock.start())  # the first thing backward computes is this gradient
        return loss

    return clock, slowed_loss


def _hook_module(module: nn.Module, clock: Clock, ends_in_loss: bool) -> None:
    """Forward, backward and gradient-accumulation hooks of one model part."""
    def before(_: nn.Module, args: tuple[object, ...]) -> None:
        clock.start()
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.requires_grad:  # a pipeline stage's received activation
            first.register_hook(lambda _: clock.tick())  # the last gradient this stage's backward computes

    def after(_: nn.Module, __: tuple[object, ...], output: object) -> None:
        clock.tick()
        if not ends_in_loss and isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda _: clock.start())  # the next stage's gradient has arrived

    module.register_forward_pre_hook(before)
    module.register_forward_hook(after)
    for param in module.parameters():
        if param.requires_grad and not is_dtensor(param):  # FSDP2 calls these after its reduce-scatter
            param.register_post_accumulate_grad_hook(lambda _: clock.tick())


def _hook_fsdp_blocks(module: nn.Module, clock: Clock, ends_in_loss: bool) -> None:
    """Cut the stretches of a model sharded by FSDP2 at its sharded blocks (and, where ``module`` ends in the
    loss, at its root), so that their all-gathers and reduce-scatters fall between stretches (module docstring);
    nothing for a model FSDP2 does not shard. A pipeline stage's root is left alone: its output gradient arrives
    from the next stage after a wait, which ends no compute."""
    if not any(is_dtensor(p) for p in module.parameters()):
        return
    from torch.distributed.fsdp import FSDPModule

    waiting = [False]  # in the backward, between a block's input gradient and the next block's output gradient

    def cut(*_: object) -> None:
        clock.tick()

    def input_grad(_: torch.Tensor) -> None:
        clock.tick()
        waiting[0] = True  # FSDP2's reduce-scatter, then the next block's gather: not compute

    def output_grad_before_gather(_: torch.Tensor) -> None:
        if not waiting[0]:  # the loss's or the output head's backward ends here
            clock.tick()
        waiting[0] = False

    def output_grad(_: torch.Tensor) -> None:
        clock.start()  # after FSDP2's pre-backward: this block's (re-)gather and its prefetch of the next are done

    def before(_: nn.Module, args: tuple[object, ...]) -> None:
        clock.start()  # after FSDP2's pre-forward: its all-gather is done
        waiting[0] = False
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.requires_grad:  # FSDP2's post-backward node sits before it
            first.register_hook(input_grad)

    def ahead_of_fsdp(_: nn.Module, __: tuple[object, ...], output: object) -> None:
        # Registered before FSDP2's pre-backward hook on the same tensor (its post-forward registers it), so in the
        # backward it runs first: the compute before the gather ends here, not after the gather's wait.
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(output_grad_before_gather)

    def after(_: nn.Module, __: tuple[object, ...], output: object) -> None:
        clock.start()
        if isinstance(output, torch.Tensor) and output.requires_grad:  # after FSDP2's pre-backward (the gather)
            output.register_hook(output_grad)

    for block in module.modules():
        if not isinstance(block, FSDPModule) or (block is module and not ends_in_loss):
            continue
        if block is not module:  # the root's forward gather precedes _hook_module's start already
            block.register_forward_pre_hook(cut, prepend=True)  # the compute before it ends before the gather
            block.register_forward_pre_hook(before)
            block.register_forward_hook(cut, prepend=True)  # before FSDP2's post-forward (the reshard)
        block.register_forward_hook(ahead_of_fsdp, prepend=True)
        block.register_forward_hook(after if block is not module else _late(output_grad))


def _late(hook: Callable[[torch.Tensor], None]) -> Callable[[nn.Module, tuple[object, ...], object], None]:
    """A forward hook that registers ``hook`` on the module's output gradient, after FSDP2's pre-backward."""
    def register(_: nn.Module, __: tuple[object, ...], output: object) -> None:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(hook)
    return register
