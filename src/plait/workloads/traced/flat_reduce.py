"""A flat all-reduce after the last micro-batch, not overlapped with the backward: apex's post-accumulation path.

DeepLearningExamples' PyTorch BERT at pytorch:19.07 (run_pretraining.py @6fe463f, ``take_optimizer_step``) with
``--allreduce_post_accumulation`` (``scripts/run_pretraining.sh`` passes it by default, with
``--allreduce_post_accumulation_fp16``) wraps the model in no DDP: the gradients are reduced once per optimizer step,
after the last micro-batch's backward, in three steps on the device:

1. ``amp_C.multi_tensor_scale`` reads every fp32 master gradient and writes it, pre-divided, into one flat buffer
   of the reduction's dtype (fp16 with ``--allreduce_post_accumulation_fp16``);
2. ``torch.distributed.all_reduce(flat_raw)``: one all-reduce of the whole buffer;
3. ``amp_C.multi_tensor_scale`` reads the buffer back and writes the unscaled fp32 master gradients.

Nothing overlaps them: the host calls them in order after ``loss.backward()`` and ``loss.item()`` returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan


@dataclass(frozen=True, kw_only=True)
class FlatReduce:
    """One flat gradient all-reduce after the backward (module docstring)."""

    reduce_bytes: float
    """Bytes per gradient element of the flat buffer that is all-reduced."""
    master_bytes: float
    """Bytes per element of the gradients copied into and back out of the buffer."""
    source: str
    """Where this reduction is described."""

    def exposed_s(self, cluster: Cluster, plan: Plan, num_params: float) -> float:
        """Seconds after the last backward: the copy in (read the master gradients, write the buffer), the
        all-reduce over the ``dp`` replicas, the copy out (read the buffer, write the master gradients)."""
        if plan.dp <= 1:
            return 0.0
        copies = 2 * (self.master_bytes + self.reduce_bytes) * num_params
        reduce = float(collective_s(cluster, "all_reduce", plan.dp, plan.tp, self.reduce_bytes * num_params))
        return copies / memory_bytes_per_s(cluster.accelerator) + reduce


APEX_POST_ACCUMULATION_FP16 = FlatReduce(
    reduce_bytes=2.0, master_bytes=4.0,
    source="DeepLearningExamples PyTorch/LanguageModeling/BERT run_pretraining.py @6fe463f take_optimizer_step: "
           "fp32 master gradients (apex amp O2, master_weights=True) scaled into a flat fp16 buffer "
           "(--allreduce_post_accumulation_fp16, scripts/run_pretraining.sh default), all_reduce, scaled back")
"""The pytorch:19.07 BERT scripts' reduction in mixed precision (module docstring)."""
