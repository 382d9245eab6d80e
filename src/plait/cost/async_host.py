"""The host work of plait's asynchronous runtime beyond the synchronous step, counted from its code.

Where the ranks are host processes (a calibrated CPU, :func:`plait.cost.swap.device_is_host`), every torch
operator a worker or server runs costs its dispatch and its memory traffic on that rank's core. Counted here, per
exchange, from :mod:`plait.run.async_train` (``T`` parameter tensors of a worker, ``S`` servers, ``E`` elements):

- **ops**: ATen operators the dispatcher runs at the top level (what PyTorch's profiler records without a parent
  op: a ``reshape`` or a ``.to`` that copies nothing counts, as do the four a ``torch.tensor`` of a list runs),
  each at the host's time per eager op (:func:`plait.cost.host.issue_s`; ``plait calibrate`` times it whole into
  ``host_launch_us``, :func:`plait.run.calibrate_compute.dispatch_us`);
- **passes**: fp32 streams over the elements (each operand read and each result written once), at the
  calibrated streaming bandwidth (:func:`plait.cost.compute.memory_bytes_per_s`).

The sends and receives themselves are the messages' transfer times (:func:`plait.cost.async_sgd.message_s`).
Python beyond the torch calls (the loops, the server's bookkeeping of versions and held replies) is not costed.

On accelerators the runtime does not run (it starts CPU ranks only: ``plait run`` refuses ``--nodes`` for these
methods) nothing is added: the servers' update stays the fused ideal of ``server_passes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.cost.host import issue_s
from plait.cost.servers import GRAD_BYTES
from plait.cost.swap import device_is_host
from plait.hardware.cluster import Cluster
from plait.sync.asynchronous import ADAMW_PASSES, Asynchronous

ADAMW_OPS_PER_TENSOR = 10
"""ATen operators of ``torch.optim.AdamW``'s for-loop step per tensor (the default on CPU tensors: foreach kernels
are CUDA's, torch/utils/_foreach_utils.py), torch/optim/adam.py ``_single_tensor_adam`` (PyTorch 2.13): the step
count ``+= 1``, the decoupled weight decay ``mul_``, ``exp_avg.lerp_``, ``exp_avg_sq.mul_(..).addcmul_``, the step
count read back (``item``), ``sqrt``, ``/``, ``add_(eps)``, ``addcdiv_``."""
ADAMW_OPS_PER_STEP = 2
"""ATen operators of one ``Optimizer.step`` call besides its tensors': the profiler's record-function enter and exit
(torch/optim/optimizer.py, ``profile_hook_step``)."""
ADAMW_EAGER_PASSES = 20
"""fp32 streams per element of the for-loop AdamW step (the operators of :data:`ADAMW_OPS_PER_TENSOR` but the
scalar ones): ``mul_`` 2, ``lerp_`` 3, ``mul_`` 2, ``addcmul_`` 3, ``sqrt`` 2, ``/`` 2, ``add_`` 2, ``addcdiv_`` 4
(each a separate kernel, against the fused ideal's :data:`plait.sync.asynchronous.ADAMW_PASSES`)."""
HEADER_OPS = 4
"""A server reading a message's kind and version: ``float(buffer[-2])``, ``int(buffer[-1])``, a ``select`` and an
``item`` each (:func:`plait.run.async_train.serve`)."""
TENSOR_OPS = 4
"""``torch.tensor`` of a Python list (a message's header, a reply's version): ``empty``, ``to``, ``lift_fresh``,
``detach_``."""


@dataclass(frozen=True, kw_only=True)
class HostWork:
    """Torch operators and fp32 streaming passes one rank runs (module docstring)."""

    ops: int
    """ATen operators dispatched."""
    passes: float
    """fp32 streams over the elements worked on."""

    def seconds(self, cluster: Cluster, elements: float) -> float:
        """This work over ``elements`` fp32 values on one host core of ``cluster``."""
        launch_s = issue_s(cluster.accelerator, eager=True)
        return self.ops * launch_s + self.passes * GRAD_BYTES * elements / memory_bytes_per_s(cluster.accelerator)


def worker_exchange(sync: Asynchronous, tensors: int) -> HostWork:
    """A worker's operators and passes over its ``E`` parameters in one exchange with its ``S`` servers
    (:func:`plait.run.async_train._exchange`), ``tensors`` parameter tensors ``T``:

    - flatten (``_flat``): ``reshape`` and ``to`` per tensor, EASGD's parameters a ``detach`` each too, one
      ``cat`` (2 passes);
    - a message per server: a slice, the header's ``torch.tensor`` (:data:`TENSOR_OPS`), a ``cat`` (6 S; 2 passes
      over all pieces);
    - a reply per server: ``torch.empty`` and a slice, async_ps's version read (``select``, ``item``) too (2 S or
      4 S);
    - the replies joined: ``cat`` (2 passes) and ``split``;
    - applied per tensor: ``view_as`` and ``copy_`` (async_ps, 2 passes) or ``to`` and ``sub_`` (EASGD, 3 passes).

    async_ps: ``4 T + 10 S + 3`` ops, 8 passes; EASGD: ``6 T + 8 S + 3`` ops, 9 passes."""
    # async_ps's servers hold the model: its workers take the new parameters; EASGD's subtract the elastic pull
    servers, replace = sync.server_ranks, sync.servers_hold_model
    flatten = (2 if replace else 3) * tensors + 1
    replies = (4 if replace else 2) * servers
    ops = flatten + (2 + TENSOR_OPS) * servers + replies + 2 + (2 if replace else 3) * tensors
    return HostWork(ops=ops, passes=2 + 2 + 2 + (2 if replace else 3))


def worker_optimizer(sync: Asynchronous, tensors: int) -> HostWork:
    """A worker's own optimizer step per iteration beyond what the step's optimizer term charges (the fused ideal's
    streams, :data:`ADAMW_PASSES`): EASGD's workers step AdamW (:meth:`plait.sync.asynchronous.EASGD.worker_step`),
    its ops and the passes of the for-loop beyond the ideal's; async_ps's workers step none (their servers do)."""
    if sync.servers_hold_model:  # async_ps: the servers step the optimizer
        return HostWork(ops=0, passes=0.0)
    return HostWork(ops=ADAMW_OPS_PER_TENSOR * tensors + ADAMW_OPS_PER_STEP, passes=ADAMW_EAGER_PASSES - ADAMW_PASSES)


def server_update(sync: Asynchronous) -> HostWork:
    """One server's operators and passes over its piece per message (:func:`plait.run.async_train.serve`): the
    header read (:data:`HEADER_OPS`), then

    - async_ps: the gradient sliced and cloned (2 ops, 2 passes), the for-loop AdamW step over the one piece
      (:data:`ADAMW_OPS_PER_TENSOR` + :data:`ADAMW_OPS_PER_STEP` ops, :data:`ADAMW_EAGER_PASSES`), the reply
      (``detach``, the version's ``torch.tensor``, ``cat``: 6 ops, 2 passes): 24 ops, 24 passes;
    - EASGD: the slice, ``-`` (3 passes), ``alpha *`` (2), ``+=`` (3), the reply's ``torch.tensor`` and ``cat``
      (2): 13 ops, 10 passes."""
    if sync.servers_hold_model:  # async_ps: a gradient to step; EASGD: the elastic move
        return HostWork(ops=HEADER_OPS + 2 + ADAMW_OPS_PER_TENSOR + ADAMW_OPS_PER_STEP + 1 + TENSOR_OPS + 1,
                        passes=2 + ADAMW_EAGER_PASSES + 2)
    return HostWork(ops=HEADER_OPS + 4 + TENSOR_OPS + 1, passes=3 + 2 + 3 + 2)


def worker_own_s(cluster: Cluster, sync: Asynchronous, elements: float, tensors: int) -> float:
    """Seconds of a worker's own host work per exchange (``sync.every`` iterations): its exchange and its
    optimizer's extra each iteration; 0 off a host device (module docstring)."""
    if not device_is_host(cluster.accelerator):
        return 0.0
    return (worker_exchange(sync, tensors).seconds(cluster, elements)
            + sync.every * worker_optimizer(sync, tensors).seconds(cluster, elements))


def server_apply_s(cluster: Cluster, sync: Asynchronous, piece: float) -> float | None:
    """Seconds one server spends applying one message to its ``piece`` elements on a host device (``None``
    elsewhere: the fused ideal stands)."""
    if not device_is_host(cluster.accelerator):
        return None
    return server_update(sync).seconds(cluster, piece)
