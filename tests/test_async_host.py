"""The host work of the asynchronous runtime beyond the synchronous step (:mod:`plait.cost.async_host`): operator and
pass counts read off :mod:`plait.run.async_train` by hand, their seconds on a hand-set CPU, and the worker's
exchange counted as the runtime dispatches it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.autograd.profiler import profile
from torch.optim.adam import adam
from torch.optim.optimizer import _default_to_fused_or_foreach

from plait.cost.async_host import (
    ADAMW_OPS_PER_STEP,
    HostWork,
    server_update,
    worker_exchange,
    worker_optimizer,
    worker_own_s,
)
from plait.cost.async_sgd import message_s
from plait.hardware.catalog import get_cluster, resolve_cluster
from plait.hardware.figure import Figure
from plait.run import async_train
from plait.run.sends import Sends
from plait.sync import parse

ROOT = Path(__file__).resolve().parents[1]
HAND = "assumed: a test's round figure"


def _cpu(launch_us: float = 2.0, bandwidth_gb_per_s: float = 8.0,
         memory_fraction: float = 0.5):  # type: ignore[no-untyped-def]
    """The example CPU node with round figures: 2 us per op, streams at 8 GB/s x 0.5 = 4e9 B/s."""
    node = resolve_cluster(str(ROOT / "examples" / "cpu-node.toml"))
    acc = node.accelerator
    efficiency = replace(acc.efficiency, host_launch_us=Figure(value=launch_us, source=HAND),
                         memory=Figure(value=memory_fraction, source=HAND))
    return replace(node, accelerator=replace(acc, memory_bandwidth_gb_per_s=bandwidth_gb_per_s, efficiency=efficiency))


def test_counts_read_off_the_runtime_by_hand() -> None:
    """async_ps, 3 tensors, 2 servers (``_exchange``): flatten a reshape and a to per tensor and a cat (7), per
    server a slice, the header's torch.tensor (empty, to, lift_fresh, detach_) and a cat (12), per reply empty,
    slice and the version's select and item (8), join cat and split (2), per tensor view_as and copy_ (6): 35 ops;
    passes: flatten 2, messages 2, join 2, copy 2. EASGD, 3 tensors, one server: 3 detaches more (10), 6, replies
    without a version (2), 2, per tensor view_as, to and sub_ (9): 29 ops, sub_ reads 3: 9 passes; its optimizer
    3 x 10 + 2 ops. Servers: async_ps 4 header + 2 clone + 12 AdamW + 6 reply = 24 ops, 2 + 20 + 2 passes; EASGD 4 +
    slice, sub, mul, add_ + 4 torch.tensor + cat = 13 ops, 3 + 2 + 3 + 2 passes."""
    ps, easgd = parse("async_ps:staleness=4,servers=2"), parse("easgd:alpha=0.5,every=2")
    assert worker_exchange(ps, 3) == HostWork(ops=35, passes=8)
    assert worker_exchange(easgd, 3) == HostWork(ops=29, passes=9)
    assert worker_optimizer(ps, 3) == HostWork(ops=0, passes=0)  # async_ps's servers step, not its workers
    assert worker_optimizer(easgd, 3) == HostWork(ops=32, passes=13)  # 20 eager passes beyond the ideal's 7
    assert server_update(ps) == HostWork(ops=24, passes=24)
    assert server_update(easgd) == HostWork(ops=13, passes=10)


def test_seconds_on_a_hand_set_cpu() -> None:
    """2 us an op, 4e9 B/s, 1e6 elements (4e6 B a pass): async_ps's worker 35 x 2 us + 8 x 1 ms; EASGD's every 2nd
    iteration 29 x 2 us + 9 ms, plus per iteration 32 x 2 us + 13 ms. A server's piece (5e5 elements of 1e6 over 2
    servers): 24 x 2 us + 24 x 0.5 ms."""
    cpu = _cpu()
    ps, easgd = parse("async_ps:staleness=4,servers=2"), parse("easgd:alpha=0.5,every=2")
    assert worker_own_s(cpu, ps, 1e6, 3) == pytest.approx(70e-6 + 8e-3, rel=1e-12)
    assert worker_own_s(cpu, easgd, 1e6, 3) == pytest.approx(58e-6 + 9e-3 + 2 * (64e-6 + 13e-3), rel=1e-12)
    assert message_s(cpu, ps, 2, 1, 1e6)[1] == pytest.approx(48e-6 + 12e-3, rel=1e-12)


def test_nothing_added_off_a_host_device() -> None:
    """On GPUs the runtime does not run: no worker work, and the server's update stays the fused ideal (AdamW's
    7 passes over its piece at the host memory bandwidth)."""
    dgx, ps = get_cluster("dgx-a100-ib"), parse("async_ps:staleness=4,servers=2")
    assert worker_own_s(dgx, ps, 1e6, 3) == 0.0
    ideal = 7 * 4 * 5e5 / dgx.host_memory_bytes_per_s_per_gpu
    assert message_s(dgx, ps, 8, 1, 1e6)[1] == pytest.approx(ideal, rel=1e-12)


def _dispatched(code) -> int:  # type: ignore[no-untyped-def]
    """Top-level ATen operators ``code`` runs, as PyTorch's profiler records them."""
    with profile() as prof:
        code()
    return sum(1 for event in prof.function_events if event.cpu_parent is None)


class _Done:
    def wait(self) -> None:
        pass


def test_the_runtime_dispatches_the_counted_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's exchange as :func:`plait.run.async_train._exchange` runs it, sends faked and each receive one
    ``zero_`` (taken off), and PyTorch's for-loop AdamW step: the counts the cost model charges."""
    monkeypatch.setattr(Sends, "isend", staticmethod(lambda tensor, dst, group, tag: _Done()))
    monkeypatch.setattr(async_train.dist, "recv", lambda buffer, src=None, tag=0: buffer.zero_())
    params = [torch.nn.Parameter(torch.ones(s)) for s in ((4, 3), (5,), (2, 2))]
    for p in params:
        p.grad = torch.ones_like(p)
    for spec, sizes, method in (("async_ps:staleness=4,servers=2", [10, 11], "push_gradient"),
                                ("easgd:alpha=0.5,every=2", [21], "push_parameters")):
        # the pushes use no optimizer (and building one imports torch._dynamo: seconds)
        worker = async_train._Worker(None, params, sizes, 2, [0] * len(sizes))  # type: ignore[arg-type]
        ops = _dispatched(getattr(worker, method)) - len(sizes)
        assert ops == worker_exchange(parse(spec), len(params)).ops, spec
    # AdamW's for-loop step, called as torch.optim.AdamW.step calls it on CPU tensors (not through ``step``, whose
    # first call imports torch._dynamo: seconds), less the 3 detaches of the call's arguments and less the step's
    # 2 record-function operators
    assert _default_to_fused_or_foreach(params, False, False) == (False, False)  # CPU: the for-loop
    state = [[torch.zeros_like(p) for p in params] for _ in range(2)]
    steps = [torch.tensor(1.0) for _ in params]
    step = lambda: adam([p.detach() for p in params], [p.grad for p in params], *state, [], steps, foreach=False,
                        capturable=False, differentiable=False, fused=None, grad_scale=None, found_inf=None,
                        has_complex=False, amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-3, weight_decay=0.01,
                        eps=1e-8, maximize=False, decoupled_weight_decay=True)  # AdamW's defaults
    counted = _dispatched(step) - 3
    assert counted == worker_optimizer(parse("easgd:alpha=0.5,every=2"), len(params)).ops - ADAMW_OPS_PER_STEP
