"""A flat gradient all-reduce after the last micro-batch's backward, not overlapped with it: how DeepLearningExamples'
PyTorch BERT reduces, in both containers of the classic rows.

- pytorch:19.07 (run_pretraining.py @6fe463f, ``take_optimizer_step``) with ``--allreduce_post_accumulation``
  (``run.sub`` and ``scripts/run_pretraining.sh`` pass it, with ``--allreduce_post_accumulation_fp16``) wraps the
  model in no DDP: after the last micro-batch ``amp_C.multi_tensor_scale`` reads every fp32 master gradient and
  writes it, pre-divided, into one flat fp16 buffer; ``torch.distributed.all_reduce(flat_raw)`` sums it;
  ``multi_tensor_scale`` reads it back and writes the fp32 master gradients. The host calls them in order after
  ``loss.backward()`` and ``loss.item()`` returned.
- pytorch:21.11 (run_pretraining.py @a9e2c1d5, lines 440-470 and 666-671) wraps the model in PyTorch DDP with
  ``bucket_cap_mb`` set to the device's whole memory, so every gradient lands in one bucket (a view of it:
  ``gradient_as_bucket_view=True``) that is reduced once its last gradient is ready, at the end of the backward;
  earlier micro-batches run under ``no_sync()``. Its comm hook divides the bucket by the accumulation steps
  (``bucket.buffer().div_``: a read and a write) before the all-reduce. The gradients are the model's dtype: fp16
  where ``--allreduce_post_accumulation_fp16`` makes the model ``half()`` (``run.sub`` passes it with ``--fp16``),
  fp32 in TF32 runs.
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
    copy_bytes: float
    """Bytes per gradient element that the device reads and writes around the all-reduce (copies into and out of
    the buffer, scaling), at the sustained memory bandwidth."""
    source: str
    """Where this reduction is described."""

    def exposed_s(self, cluster: Cluster, plan: Plan, num_params: float) -> float:
        """Seconds after the last backward: the copies around it and the all-reduce over the ``dp`` replicas."""
        if plan.dp <= 1:
            return 0.0
        copies = self.copy_bytes * num_params
        reduce = float(collective_s(cluster, "all_reduce", plan.dp, plan.tp, self.reduce_bytes * num_params))
        return copies / memory_bytes_per_s(cluster.accelerator) + reduce


APEX_POST_ACCUMULATION_FP16 = FlatReduce(
    reduce_bytes=2.0, copy_bytes=2 * (4.0 + 2.0),
    source="DeepLearningExamples PyTorch/LanguageModeling/BERT run_pretraining.py @6fe463f take_optimizer_step: "
           "fp32 master gradients (apex amp O2, master_weights=True) scaled into a flat fp16 buffer "
           "(--allreduce_post_accumulation_fp16) and back: read 4 + write 2 bytes, then read 2 + write 4")
"""The pytorch:19.07 BERT scripts' reduction in mixed precision (module docstring)."""
DDP_ONE_BUCKET_FP16 = FlatReduce(
    reduce_bytes=2.0, copy_bytes=2 * 2.0,
    source="DeepLearningExamples PyTorch/LanguageModeling/BERT run_pretraining.py @a9e2c1d5: DDP with "
           "bucket_cap_mb = the device's memory, fp16 gradients of model.half(), the comm hook's div_ of the bucket")
"""The pytorch:21.11 BERT scripts' reduction in mixed precision (module docstring)."""
DDP_ONE_BUCKET_FP32 = FlatReduce(
    reduce_bytes=4.0, copy_bytes=2 * 4.0,
    source="DeepLearningExamples PyTorch/LanguageModeling/BERT run_pretraining.py @a9e2c1d5: DDP with "
           "bucket_cap_mb = the device's memory, fp32 gradients (TF32 runs), the comm hook's div_ of the bucket")
"""The pytorch:21.11 BERT scripts' reduction in TF32 runs (module docstring)."""
